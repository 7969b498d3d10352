/* fatbin_archs FILE: the architectures whose code a shared object's CUDA fatbinary holds, one
 * line "sass 80 86 ..." (machine code, ELF entries) and one "ptx 120" (PTX entries), read from
 * its .nv_fatbin section without the toolkit's cuobjdump. The fatbinary is a sequence of
 * containers (magic 0xBA55ED50, u16 version, u16 header size, u64 payload size), each a
 * sequence of entries (u16 kind: 1 PTX, 2 ELF; u16 version; u32 header size; u64 payload size;
 * the u32 architecture at byte 28 of the entry's header). Exit 1 with a message naming the file
 * when it has no such section or a malformed one. For gpu_cuda_archs (module_archs.sh). */
#include <elf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *b = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long len = ftell(f);
        if (len > 0 && fseek(f, 0, SEEK_SET) == 0 && (b = malloc((size_t)len)) &&
            fread(b, 1, (size_t)len, f) != (size_t)len) {
            free(b);
            b = NULL;
        }
        *n = len > 0 ? (size_t)len : 0;
    }
    fclose(f);
    return b;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fatbin_archs FILE\n");
        return 2;
    }
    size_t n = 0;
    unsigned char *b = slurp(argv[1], &n);
    if (!b || n < sizeof(Elf64_Ehdr) || memcmp(b, ELFMAG, SELFMAG) || b[EI_CLASS] != ELFCLASS64) {
        fprintf(stderr, "fatbin_archs: %s: not a readable 64-bit ELF file\n", argv[1]);
        return 1;
    }
    Elf64_Ehdr eh;
    memcpy(&eh, b, sizeof eh);
    if (eh.e_shoff + (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr) > n || eh.e_shstrndx >= eh.e_shnum) {
        fprintf(stderr, "fatbin_archs: %s: section headers outside the file\n", argv[1]);
        return 1;
    }
    Elf64_Shdr names;
    memcpy(&names, b + eh.e_shoff + eh.e_shstrndx * sizeof(Elf64_Shdr), sizeof names);
    int sass[1024] = {0}, ptx[1024] = {0}, found = 0;
    for (int i = 0; i < eh.e_shnum; i++) {
        Elf64_Shdr sh;
        memcpy(&sh, b + eh.e_shoff + (size_t)i * sizeof sh, sizeof sh);
        if (names.sh_offset + sh.sh_name >= n ||
            strcmp((const char *)b + names.sh_offset + sh.sh_name, ".nv_fatbin") ||
            sh.sh_offset + sh.sh_size > n)
            continue;
        found = 1;
        const unsigned char *s = b + sh.sh_offset;
        for (size_t at = 0; at + 16 <= sh.sh_size;) {
            uint32_t magic;
            uint16_t hs;
            uint64_t fs;
            memcpy(&magic, s + at, 4);
            if (magic != 0xBA55ED50u) {
                at += 8; /* containers are 8-byte aligned */
                continue;
            }
            memcpy(&hs, s + at + 6, 2);
            memcpy(&fs, s + at + 8, 8);
            size_t p = at + hs, end = p + fs;
            if (end > sh.sh_size) {
                fprintf(stderr, "fatbin_archs: %s: container at %zu overruns .nv_fatbin\n",
                        argv[1], at);
                return 1;
            }
            while (p + 32 <= end) {
                uint16_t kind;
                uint32_t ehs, arch;
                uint64_t ps;
                memcpy(&kind, s + p, 2);
                memcpy(&ehs, s + p + 4, 4);
                memcpy(&ps, s + p + 8, 8);
                memcpy(&arch, s + p + 28, 4);
                if (ehs < 32 || arch >= 1024) {
                    fprintf(stderr, "fatbin_archs: %s: malformed entry at %zu\n", argv[1], p);
                    return 1;
                }
                if (kind == 1) ptx[arch] = 1;
                if (kind == 2) sass[arch] = 1;
                p += ehs + ps;
            }
            at = end;
        }
    }
    free(b);
    if (!found) {
        fprintf(stderr, "fatbin_archs: %s: no .nv_fatbin section\n", argv[1]);
        return 1;
    }
    printf("sass");
    for (int a = 0; a < 1024; a++)
        if (sass[a]) printf(" %d", a);
    printf("\nptx");
    for (int a = 0; a < 1024; a++)
        if (ptx[a]) printf(" %d", a);
    printf("\n");
    return 0;
}
