/* The C library's exp over arrays (exp_vec.h): glibc's algorithm, lane by lane.
 *
 * exp(x) = 2^(k/N) exp(r), N = 128: k = round(x N / ln 2) (through the 1.5*2^52 shift), r = x -
 * k ln2/N in two parts, exp(r) - 1 ~ r + C2 r^2 + C3 r^3 + C4 r^4 + C5 r^5, and 2^(k/N) =
 * 2^(k>>7) H[k%N] (1 + T[k%N]); result scale + scale*tmp with tmp = T + r + r^2 (C2 + r C3) +
 * r^4 (C4 + r C5). Each multiply-add is one FMA, as the C library's FMA build contracts them
 * (vfmadd in its disassembly, in this order). TAB[2k] holds the bits of T[k], TAB[2k+1] those
 * of H[k] less k << 45, H[k] the double nearest 2^(k/128) and T[k] the double nearest
 * 2^(k/128)/H[k] - 1 (tools/exp_table.py prints them; they are the library's table). */
#include "exp_vec.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define INV_LN2_N 0x1.71547652b82fep7 /* N / ln 2 */
#define NEG_LN2_HI_N -0x1.62e42fefa0000p-8
#define NEG_LN2_LO_N -0x1.cf79abc9e3b3ap-47
#define SHIFT 0x1.8p52
#define C2 0x1.ffffffffffdbdp-2
#define C3 0x1.555555555543cp-3
#define C4 0x1.55555cf172b91p-5
#define C5 0x1.1111167a4d017p-7
#define TOP_LO 0x3c9u /* top 12 bits of 2^-54 */
#define TOP_HI 0x408u /* top 12 bits of 512 */

static const uint64_t TAB[256] = {
    0x0000000000000000ull, 0x3ff0000000000000ull, 0x3c9b3b4f1a88bf6eull, 0x3feff63da9fb3335ull,
    0xbc7160139cd8dc5dull, 0x3fefec9a3e778061ull, 0xbc905e7a108766d1ull, 0x3fefe315e86e7f85ull,
    0x3c8cd2523567f613ull, 0x3fefd9b0d3158574ull, 0xbc8bce8023f98efaull, 0x3fefd06b29ddf6deull,
    0x3c60f74e61e6c861ull, 0x3fefc74518759bc8ull, 0x3c90a3e45b33d399ull, 0x3fefbe3ecac6f383ull,
    0x3c979aa65d837b6dull, 0x3fefb5586cf9890full, 0x3c8eb51a92fdeffcull, 0x3fefac922b7247f7ull,
    0x3c3ebe3d702f9cd1ull, 0x3fefa3ec32d3d1a2ull, 0xbc6a033489906e0bull, 0x3fef9b66affed31bull,
    0xbc9556522a2fbd0eull, 0x3fef9301d0125b51ull, 0xbc5080ef8c4eea55ull, 0x3fef8abdc06c31ccull,
    0xbc91c923b9d5f416ull, 0x3fef829aaea92de0ull, 0x3c80d3e3e95c55afull, 0x3fef7a98c8a58e51ull,
    0xbc801b15eaa59348ull, 0x3fef72b83c7d517bull, 0xbc8f1ff055de323dull, 0x3fef6af9388c8deaull,
    0x3c8b898c3f1353bfull, 0x3fef635beb6fcb75ull, 0xbc96d99c7611eb26ull, 0x3fef5be084045cd4ull,
    0x3c9aecf73e3a2f60ull, 0x3fef54873168b9aaull, 0xbc8fe782cb86389dull, 0x3fef4d5022fcd91dull,
    0x3c8a6f4144a6c38dull, 0x3fef463b88628cd6ull, 0x3c807a05b0e4047dull, 0x3fef3f49917ddc96ull,
    0x3c968efde3a8a894ull, 0x3fef387a6e756238ull, 0x3c875e18f274487dull, 0x3fef31ce4fb2a63full,
    0x3c80472b981fe7f2ull, 0x3fef2b4565e27cddull, 0xbc96b87b3f71085eull, 0x3fef24dfe1f56381ull,
    0x3c82f7e16d09ab31ull, 0x3fef1e9df51fdee1ull, 0xbc3d219b1a6fbffaull, 0x3fef187fd0dad990ull,
    0x3c8b3782720c0ab4ull, 0x3fef1285a6e4030bull, 0x3c6e149289cecb8full, 0x3fef0cafa93e2f56ull,
    0x3c834d754db0abb6ull, 0x3fef06fe0a31b715ull, 0x3c864201e2ac744cull, 0x3fef0170fc4cd831ull,
    0x3c8fdd395dd3f84aull, 0x3feefc08b26416ffull, 0xbc86a3803b8e5b04ull, 0x3feef6c55f929ff1ull,
    0xbc924aedcc4b5068ull, 0x3feef1a7373aa9cbull, 0xbc9907f81b512d8eull, 0x3feeecae6d05d866ull,
    0xbc71d1e83e9436d2ull, 0x3feee7db34e59ff7ull, 0xbc991919b3ce1b15ull, 0x3feee32dc313a8e5ull,
    0x3c859f48a72a4c6dull, 0x3feedea64c123422ull, 0xbc9312607a28698aull, 0x3feeda4504ac801cull,
    0xbc58a78f4817895bull, 0x3feed60a21f72e2aull, 0xbc7c2c9b67499a1bull, 0x3feed1f5d950a897ull,
    0x3c4363ed60c2ac11ull, 0x3feece086061892dull, 0x3c9666093b0664efull, 0x3feeca41ed1d0057ull,
    0x3c6ecce1daa10379ull, 0x3feec6a2b5c13cd0ull, 0x3c93ff8e3f0f1230ull, 0x3feec32af0d7d3deull,
    0x3c7690cebb7aafb0ull, 0x3feebfdad5362a27ull, 0x3c931dbdeb54e077ull, 0x3feebcb299fddd0dull,
    0xbc8f94340071a38eull, 0x3feeb9b2769d2ca7ull, 0xbc87deccdc93a349ull, 0x3feeb6daa2cf6642ull,
    0xbc78dec6bd0f385full, 0x3feeb42b569d4f82ull, 0xbc861246ec7b5cf6ull, 0x3feeb1a4ca5d920full,
    0x3c93350518fdd78eull, 0x3feeaf4736b527daull, 0x3c7b98b72f8a9b05ull, 0x3feead12d497c7fdull,
    0x3c9063e1e21c5409ull, 0x3feeab07dd485429ull, 0x3c34c7855019c6eaull, 0x3feea9268a5946b7ull,
    0x3c9432e62b64c035ull, 0x3feea76f15ad2148ull, 0xbc8ce44a6199769full, 0x3feea5e1b976dc09ull,
    0xbc8c33c53bef4da8ull, 0x3feea47eb03a5585ull, 0xbc845378892be9aeull, 0x3feea34634ccc320ull,
    0xbc93cedd78565858ull, 0x3feea23882552225ull, 0x3c5710aa807e1964ull, 0x3feea155d44ca973ull,
    0xbc93b3efbf5e2228ull, 0x3feea09e667f3bcdull, 0xbc6a12ad8734b982ull, 0x3feea012750bdabfull,
    0xbc6367efb86da9eeull, 0x3fee9fb23c651a2full, 0xbc80dc3d54e08851ull, 0x3fee9f7df9519484ull,
    0xbc781f647e5a3ecfull, 0x3fee9f75e8ec5f74ull, 0xbc86ee4ac08b7db0ull, 0x3fee9f9a48a58174ull,
    0xbc8619321e55e68aull, 0x3fee9feb564267c9ull, 0x3c909ccb5e09d4d3ull, 0x3feea0694fde5d3full,
    0xbc7b32dcb94da51dull, 0x3feea11473eb0187ull, 0x3c94ecfd5467c06bull, 0x3feea1ed0130c132ull,
    0x3c65ebe1abd66c55ull, 0x3feea2f336cf4e62ull, 0xbc88a1c52fb3cf42ull, 0x3feea427543e1a12ull,
    0xbc9369b6f13b3734ull, 0x3feea589994cce13ull, 0xbc805e843a19ff1eull, 0x3feea71a4623c7adull,
    0xbc94d450d872576eull, 0x3feea8d99b4492edull, 0x3c90ad675b0e8a00ull, 0x3feeaac7d98a6699ull,
    0x3c8db72fc1f0eab4ull, 0x3feeace5422aa0dbull, 0xbc65b6609cc5e7ffull, 0x3feeaf3216b5448cull,
    0x3c7bf68359f35f44ull, 0x3feeb1ae99157736ull, 0xbc93091fa71e3d83ull, 0x3feeb45b0b91ffc6ull,
    0xbc5da9b88b6c1e29ull, 0x3feeb737b0cdc5e5ull, 0xbc6c23f97c90b959ull, 0x3feeba44cbc8520full,
    0xbc92434322f4f9aaull, 0x3feebd829fde4e50ull, 0xbc85ca6cd7668e4bull, 0x3feec0f170ca07baull,
    0x3c71affc2b91ce27ull, 0x3feec49182a3f090ull, 0x3c6dd235e10a73bbull, 0x3feec86319e32323ull,
    0xbc87c50422622263ull, 0x3feecc667b5de565ull, 0x3c8b1c86e3e231d5ull, 0x3feed09bec4a2d33ull,
    0xbc91bbd1d3bcbb15ull, 0x3feed503b23e255dull, 0x3c90cc319cee31d2ull, 0x3feed99e1330b358ull,
    0x3c8469846e735ab3ull, 0x3feede6b5579fdbfull, 0xbc82dfcd978e9db4ull, 0x3feee36bbfd3f37aull,
    0x3c8c1a7792cb3387ull, 0x3feee89f995ad3adull, 0xbc907b8f4ad1d9faull, 0x3feeee07298db666ull,
    0xbc55c3d956dcaebaull, 0x3feef3a2b84f15fbull, 0xbc90a40e3da6f640ull, 0x3feef9728de5593aull,
    0xbc68d6f438ad9334ull, 0x3feeff76f2fb5e47ull, 0xbc91eee26b588a35ull, 0x3fef05b030a1064aull,
    0x3c74ffd70a5fddcdull, 0x3fef0c1e904bc1d2ull, 0xbc91bdfbfa9298acull, 0x3fef12c25bd71e09ull,
    0x3c736eae30af0cb3ull, 0x3fef199bdd85529cull, 0x3c8ee3325c9ffd94ull, 0x3fef20ab5fffd07aull,
    0x3c84e08fd10959acull, 0x3fef27f12e57d14bull, 0x3c63cdaf384e1a67ull, 0x3fef2f6d9406e7b5ull,
    0x3c676b2c6c921968ull, 0x3fef3720dcef9069ull, 0xbc808a1883ccb5d2ull, 0x3fef3f0b555dc3faull,
    0xbc8fad5d3ffffa6full, 0x3fef472d4a07897cull, 0xbc900dae3875a949ull, 0x3fef4f87080d89f2ull,
    0x3c74a385a63d07a7ull, 0x3fef5818dcfba487ull, 0xbc82919e2040220full, 0x3fef60e316c98398ull,
    0x3c8e5a50d5c192acull, 0x3fef69e603db3285ull, 0x3c843a59ac016b4bull, 0x3fef7321f301b460ull,
    0xbc82d52107b43e1full, 0x3fef7c97337b9b5full, 0xbc892ab93b470dc9ull, 0x3fef864614f5a129ull,
    0x3c74b604603a88d3ull, 0x3fef902ee78b3ff6ull, 0x3c83c5ec519d7271ull, 0x3fef9a51fbc74c83ull,
    0xbc8ff7128fd391f0ull, 0x3fefa4afa2a490daull, 0xbc8dae98e223747dull, 0x3fefaf482d8e67f1ull,
    0x3c8ec3bc41aa2008ull, 0x3fefba1bee615a27ull, 0x3c842b94c3a9eb32ull, 0x3fefc52b376bba97ull,
    0x3c8a64a931d185eeull, 0x3fefd0765b6e4540ull, 0xbc8e37bae43be3edull, 0x3fefdbfdad9cbe14ull,
    0x3c77893b4d91cd9dull, 0x3fefe7c1819e90d8ull, 0x3c5305c14160cc89ull, 0x3feff3c22b8f71f1ull,
};

/* ---------------------------------------------------------------- vector paths */

#if defined(__x86_64__)

/* v with its 128-bit lane `lane` replaced by the two doubles at p (AVX-512F's 32x4 insert). */
#define ins2(v, p, lane)                                                                           \
    _mm512_castps_pd(_mm512_insertf32x4(_mm512_castpd_ps(v), _mm_castpd_ps(_mm_loadu_pd(p)), lane))

/* exp of 8 lanes; *bad gets the lanes outside the main range (their values are not exp). */
__attribute__((target("avx512f"))) static __m512d exp8(__m512d x, __mmask8 *bad) {
    __m512i bits = _mm512_castpd_si512(x);
    __m512i top = _mm512_and_si512(_mm512_srli_epi64(bits, 52), _mm512_set1_epi64(0x7ff));
    /* main range: TOP_LO <= abstop < TOP_HI */
    *bad = _mm512_cmplt_epu64_mask(top, _mm512_set1_epi64(TOP_LO)) |
           _mm512_cmpge_epu64_mask(top, _mm512_set1_epi64(TOP_HI));
    __m512d kd = _mm512_fmadd_pd(x, _mm512_set1_pd(INV_LN2_N), _mm512_set1_pd(SHIFT));
    __m512i ki = _mm512_castpd_si512(kd);
    kd = _mm512_sub_pd(kd, _mm512_set1_pd(SHIFT));
    __m512d r = _mm512_fmadd_pd(kd, _mm512_set1_pd(NEG_LN2_HI_N), x);
    r = _mm512_fmadd_pd(kd, _mm512_set1_pd(NEG_LN2_LO_N), r);
    /* TAB[2k] and TAB[2k+1] of each lane as one 16-byte load, the pairs of lanes 0, 2, 4, 6
     * and 1, 3, 5, 7 unpacked into T and H: fewer cycles than two 8-lane gathers */
    _Alignas(64) int64_t ix[8];
    _mm512_store_si512(ix, _mm512_and_si512(ki, _mm512_set1_epi64(127)));
    const double *tab = (const double *)(const void *)TAB;
    __m512d ev = _mm512_castpd128_pd512(_mm_loadu_pd(tab + 2 * ix[0]));
    __m512d od = _mm512_castpd128_pd512(_mm_loadu_pd(tab + 2 * ix[1]));
    ev = ins2(ev, tab + 2 * ix[2], 1);
    od = ins2(od, tab + 2 * ix[3], 1);
    ev = ins2(ev, tab + 2 * ix[4], 2);
    od = ins2(od, tab + 2 * ix[5], 2);
    ev = ins2(ev, tab + 2 * ix[6], 3);
    od = ins2(od, tab + 2 * ix[7], 3);
    __m512d tail = _mm512_unpacklo_pd(ev, od);
    __m512i sbits = _mm512_add_epi64(_mm512_castpd_si512(_mm512_unpackhi_pd(ev, od)),
                                     _mm512_slli_epi64(ki, 45));
    __m512d r2 = _mm512_mul_pd(r, r);
    __m512d a = _mm512_fmadd_pd(r, _mm512_set1_pd(C3), _mm512_set1_pd(C2));
    __m512d b = _mm512_fmadd_pd(r, _mm512_set1_pd(C5), _mm512_set1_pd(C4));
    __m512d tmp = _mm512_fmadd_pd(r2, a, _mm512_add_pd(tail, r));
    tmp = _mm512_fmadd_pd(_mm512_mul_pd(r2, r2), b, tmp);
    __m512d scale = _mm512_castsi512_pd(sbits);
    return _mm512_fmadd_pd(scale, tmp, scale);
}

__attribute__((target("avx512f"))) static void exp_n512(const double *x, double *y, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __mmask8 bad;
        double in[8]; /* the lanes' inputs: y may be x */
        __m512d v = _mm512_loadu_pd(x + i);
        _mm512_storeu_pd(in, v);
        _mm512_storeu_pd(y + i, exp8(v, &bad));
        for (int j = 0; bad && j < 8; j++)
            if (bad >> j & 1) y[i + j] = exp(in[j]);
    }
    for (; i < n; i++)
        y[i] = exp(x[i]);
}

/* exp of 4 lanes; *bad gets the lanes outside the main range as a 4-bit mask. */
__attribute__((target("avx2,fma"))) static __m256d exp4(__m256d x, int *bad) {
    __m256i bits = _mm256_castpd_si256(x);
    __m256i top = _mm256_and_si256(_mm256_srli_epi64(bits, 52), _mm256_set1_epi64x(0x7ff));
    /* top - TOP_LO >= TOP_HI - TOP_LO unsigned, as signed compares on small values */
    __m256i lo = _mm256_cmpgt_epi64(_mm256_set1_epi64x(TOP_LO), top);
    __m256i hi = _mm256_cmpgt_epi64(top, _mm256_set1_epi64x(TOP_HI - 1));
    *bad = _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_or_si256(lo, hi)));
    __m256d kd = _mm256_fmadd_pd(x, _mm256_set1_pd(INV_LN2_N), _mm256_set1_pd(SHIFT));
    __m256i ki = _mm256_castpd_si256(kd);
    kd = _mm256_sub_pd(kd, _mm256_set1_pd(SHIFT));
    __m256d r = _mm256_fmadd_pd(kd, _mm256_set1_pd(NEG_LN2_HI_N), x);
    r = _mm256_fmadd_pd(kd, _mm256_set1_pd(NEG_LN2_LO_N), r);
    __m256i idx = _mm256_slli_epi64(_mm256_and_si256(ki, _mm256_set1_epi64x(127)), 1);
    __m256d tail = _mm256_castsi256_pd(_mm256_i64gather_epi64((const long long *)TAB, idx, 8));
    __m256i sbits = _mm256_add_epi64(_mm256_i64gather_epi64((const long long *)(TAB + 1), idx, 8),
                                     _mm256_slli_epi64(ki, 45));
    __m256d r2 = _mm256_mul_pd(r, r);
    __m256d a = _mm256_fmadd_pd(r, _mm256_set1_pd(C3), _mm256_set1_pd(C2));
    __m256d b = _mm256_fmadd_pd(r, _mm256_set1_pd(C5), _mm256_set1_pd(C4));
    __m256d tmp = _mm256_fmadd_pd(r2, a, _mm256_add_pd(tail, r));
    tmp = _mm256_fmadd_pd(_mm256_mul_pd(r2, r2), b, tmp);
    __m256d scale = _mm256_castsi256_pd(sbits);
    return _mm256_fmadd_pd(scale, tmp, scale);
}

__attribute__((target("avx2,fma"))) static void exp_n256(const double *x, double *y, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        int bad;
        double in[4]; /* the lanes' inputs: y may be x */
        __m256d v = _mm256_loadu_pd(x + i);
        _mm256_storeu_pd(in, v);
        _mm256_storeu_pd(y + i, exp4(v, &bad));
        for (int j = 0; bad && j < 4; j++)
            if (bad >> j & 1) y[i + j] = exp(in[j]);
    }
    for (; i < n; i++)
        y[i] = exp(x[i]);
}

#endif

/* ---------------------------------------------------------------- the path */

typedef void (*exp_fn)(const double *x, double *y, size_t n);

static void exp_libm(const double *x, double *y, size_t n) {
    for (size_t i = 0; i < n; i++)
        y[i] = exp(x[i]);
}

static exp_fn chosen = exp_libm;
static const char *chosen_name = "libm";
static pthread_once_t choose_once = PTHREAD_ONCE_INIT;

/* Whether fn gives exp()'s bits on check inputs: a spread over the main range, and its edges
 * (a C library built without FMA, or with another algorithm, differs on some of them). */
static int agrees(exp_fn fn) {
    enum { N = 4096 };
    static double x[N], y[N];
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < N; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = ((double)(s >> 11) * 0x1p-53 - 0.75) * 1000.0; /* [-750, 250) */
    }
    const double edge[] = {0.0,   -0.0,  0x1p-54,  -0x1p-55,  511.9, -511.9, 512.0, -745.2,
                           709.7, 710.0, INFINITY, -INFINITY, NAN,   1.0,    -1.0};
    memcpy(x, edge, sizeof edge);
    fn(x, y, N);
    for (int i = 0; i < N; i++) {
        double e = exp(x[i]);
        if (memcmp(&e, &y[i], sizeof e) != 0) return 0;
    }
    return 1;
}

static void choose(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && agrees(exp_n512)) {
        chosen = exp_n512, chosen_name = "avx512f";
        return;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && agrees(exp_n256)) {
        chosen = exp_n256, chosen_name = "avx2+fma";
        return;
    }
#endif
}

void qw_exp_vec(const double *x, double *y, size_t n) {
    pthread_once(&choose_once, choose);
    chosen(x, y, n);
}

const char *qw_exp_vec_path(void) {
    pthread_once(&choose_once, choose);
    return chosen_name;
}

int qw_exp_vec_on(const char *path, const double *x, double *y, size_t n) {
    exp_fn fn = NULL;
    if (!strcmp(path, "libm")) fn = exp_libm;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (!strcmp(path, "avx512f") && __builtin_cpu_supports("avx512f")) fn = exp_n512;
    if (!strcmp(path, "avx2+fma") && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma"))
        fn = exp_n256;
#endif
    if (!fn) return -1;
    fn(x, y, n);
    return 0;
}
