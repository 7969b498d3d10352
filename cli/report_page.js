// qsweep report: renders the data object written by cli/cmd_report.c as inline SVG.
// One element of class "cell" per eval job, and for a pipeline one of class "pcell" per
// (figure, part, recipe) (cli/report_page.h gives the DOM contract).
(function () {
  'use strict';
  var D = JSON.parse(document.getElementById('qsweep-data').textContent);
  var METRICS = {
    kl_mean: {label: 'mean KL divergence (nats)', high_is_bad: true},
    delta_ppl: {label: 'perplexity increase over the baseline', high_is_bad: true},
    kl_p99: {label: 'p99 KL divergence (nats)', high_is_bad: true},
    top1: {label: 'top-1 agreement with the baseline', high_is_bad: false},
    sqnr_db: {label: 'mean output SQNR of the quantized linears (dB)', high_is_bad: false}
  };
  var KINDS = ['q', 'k', 'v', 'o', 'gate', 'up', 'down'];
  var SVG = 'http://www.w3.org/2000/svg';
  var m = /metric=([a-z0-9_]+)/.exec(location.hash);
  var metric = m && METRICS[m[1]] ? m[1] : 'kl_mean';
  // One scale per metric across every format and quantize setting of a mode ("shared",
  // the default: NVFP4 and MXFP4 compare at a glance), or each figure scaled to itself
  // ("chart", #scale=chart).
  var scale = /scale=chart/.test(location.hash) ? 'chart' : 'shared';
  function scaleKey(j) { return scale === 'shared' ? j.mode : j.group; }
  var root = document.getElementById('report');
  var tip = document.getElementById('tip');

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function sv(tag, attrs, text) {
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function fmt(v) {
    if (v === null || v === undefined) return 'n/a';
    if (typeof v !== 'number') return String(v);
    if (v !== 0 && (Math.abs(v) < 1e-3 || Math.abs(v) >= 1e6)) return v.toExponential(3);
    return String(Number(v.toPrecision(5)));
  }
  function query(name) {
    var d = el('details');
    d.appendChild(el('summary', {}, 'query behind this (' + name + '), $1 = ' +
                                      JSON.stringify(D.experiment.name)));
    d.appendChild(el('pre', {}, D.queries[name]));
    return d;
  }
  function table(rows, cols) {
    var t = el('table'), tr = el('tr');
    cols.forEach(function (c) { tr.appendChild(el('th', {}, c)); });
    t.appendChild(tr);
    rows.forEach(function (r) {
      var tr = el('tr');
      cols.forEach(function (c) {
        var v = r[c];
        tr.appendChild(el('td', typeof v === 'number' ? {class: 'num'} : {},
                          v === null || v === undefined ? '' :
                          typeof v === 'object' ? JSON.stringify(v) : fmt(v)));
      });
      t.appendChild(tr);
    });
    return t;
  }

  // Colour of value v in [lo, hi] for the current metric: light (no damage) to dark red.
  function colour(v, lo, hi) {
    if (v === null || v === undefined || !isFinite(v)) return '#cccccc';
    var t = hi > lo ? (v - lo) / (hi - lo) : 0.5;
    if (!METRICS[metric].high_is_bad) t = 1 - t;
    var r = Math.round(255 - t * (255 - 178)), g = Math.round(247 - t * (247 - 24)),
        b = Math.round(240 - t * (240 - 43));
    return 'rgb(' + r + ',' + g + ',' + b + ')';
  }

  var cells = [];  // every cell element, for recolouring
  function cell(x, y, w, h, job) {
    var r = sv('rect', {x: x, y: y, width: w, height: h, class: 'cell', 'data-job': job.job,
                        'data-part': job.part});
    Object.keys(METRICS).forEach(function (k) {
      r.setAttribute('data-' + k, job[k] === null || job[k] === undefined ? '' : String(job[k]));
    });
    r._job = job;
    r.addEventListener('mousemove', function (ev) {
      tip.style.display = 'block';
      tip.style.left = (ev.clientX + 12) + 'px';
      tip.style.top = (ev.clientY + 12) + 'px';
      tip.textContent = hover(job);
    });
    r.addEventListener('mouseleave', function () { tip.style.display = 'none'; });
    r.appendChild(sv('title', {}, hover(job)));
    cells.push(r);
    return r;
  }
  function hover(job) {
    return job.part + ' (job ' + job.job + ')\n' + Object.keys(METRICS).map(function (k) {
      return (k === metric ? '> ' : '  ') + k + ' = ' + fmt(job[k]);
    }).join('\n');
  }

  function byBlockKind(a, b) {
    return a.block - b.block || KINDS.indexOf(a.kind) - KINDS.indexOf(b.kind);
  }

  // Heatmap of block x component (layer mode, parts "B.kind").
  function heatmap(jobs) {
    var blocks = [], kinds = KINDS.slice();
    jobs.forEach(function (j) {
      var p = /^(\d+)\.(.+)$/.exec(j.part);
      j.block = p ? +p[1] : -1;
      j.kind = p ? p[2] : j.part;
      if (blocks.indexOf(j.block) < 0) blocks.push(j.block);
      if (kinds.indexOf(j.kind) < 0) kinds.push(j.kind);
    });
    blocks.sort(function (a, b) { return a - b; });
    var cw = 44, ch = 16, left = 64, top = 22;
    var s = sv('svg', {width: left + cw * kinds.length + 10, height: top + ch * blocks.length + 6,
                       class: 'heatmap'});
    kinds.forEach(function (k, i) {
      s.appendChild(sv('text', {x: left + i * cw + cw / 2, y: 14, 'text-anchor': 'middle'}, k));
    });
    blocks.forEach(function (b, i) {
      s.appendChild(sv('text', {x: left - 6, y: top + i * ch + ch - 4, 'text-anchor': 'end'},
                       'block ' + b));
    });
    jobs.sort(byBlockKind).forEach(function (j) {
      s.appendChild(cell(left + kinds.indexOf(j.kind) * cw, top + blocks.indexOf(j.block) * ch,
                         cw, ch, j));
    });
    return s;
  }

  // One cell per block (block and cumulative modes, parts "B").
  function strip(jobs) {
    jobs.sort(function (a, b) { return +a.part - +b.part; });
    var cw = Math.max(14, Math.min(40, Math.floor(720 / jobs.length))), ch = 28;
    var s = sv('svg', {width: cw * jobs.length + 20, height: ch + 34, class: 'strip'});
    jobs.forEach(function (j, i) {
      s.appendChild(cell(10 + i * cw, 4, cw, ch, j));
      if (jobs.length <= 40 || i % 5 === 0)
        s.appendChild(sv('text', {x: 10 + i * cw + cw / 2, y: ch + 18, 'text-anchor': 'middle'},
                         j.part));
    });
    return s;
  }

  // A horizontal bar per part (component and leave-one-out modes, any other mode).
  var bar_charts = [];
  function bars(jobs) {
    jobs.sort(function (a, b) {
      var ia = KINDS.indexOf(a.part), ib = KINDS.indexOf(b.part);
      return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || (a.part < b.part ? -1 : 1);
    });
    var bh = 18, left = 90, width = 320;
    var s = sv('svg', {width: left + width + 90, height: bh * jobs.length + 8, class: 'bars'});
    var chart = {jobs: jobs, rects: [], labels: [], width: width};
    jobs.forEach(function (j, i) {
      s.appendChild(sv('text', {x: left - 6, y: 4 + i * bh + bh - 5, 'text-anchor': 'end'},
                       j.part));
      var r = cell(left, 4 + i * bh, 1, bh - 2, j);
      chart.rects.push(r);
      s.appendChild(r);
      var t = sv('text', {x: left + 4, y: 4 + i * bh + bh - 5});
      chart.labels.push(t);
      s.appendChild(t);
    });
    bar_charts.push(chart);
    return s;
  }

  // ---- methods side by side (the "methods" query): one figure per (model, format, format
  // options, quantize, mode) that holds more than one method, a row per part and a column per
  // method setting, headed by its label (j.label, kinds/method.h qs_method_setting_label: two
  // settings of one method are two columns, gptq+damp=0.01 and gptq+damp=0.1); a cell ("mcell")
  // is that job. Colours share one scale per mode across every method and format (whatever
  // #scale says), so a method's repair reads against every other's.
  var mcells = [];
  function mhover(j) {
    return j.part + '  ' + j.label + '  ' + j.format + ' ' + j.quantize + ' (job ' + j.job +
        ')\n' + Object.keys(METRICS).map(function (k) {
          return (k === metric ? '> ' : '  ') + k + ' = ' + fmt(j[k]);
        }).join('\n');
  }
  function mcell(x, y, w, h, j) {
    var a = {x: x, y: y, width: w, height: h, class: 'mcell', 'data-job': j.job,
             'data-part': j.part, 'data-method': j.method, 'data-label': j.label,
             'data-format': j.format,
             'data-quantize': j.quantize, 'data-mode': j.mode};
    Object.keys(METRICS).forEach(function (k) {
      a['data-' + k] = j[k] === null || j[k] === undefined ? '' : String(j[k]);
    });
    var e = sv('rect', a);
    e._job = j;
    e.appendChild(sv('title', {}, mhover(j)));
    e.addEventListener('mousemove', function (ev) {
      tip.style.display = 'block';
      tip.style.left = (ev.clientX + 12) + 'px';
      tip.style.top = (ev.clientY + 12) + 'px';
      tip.textContent = mhover(j);
    });
    e.addEventListener('mouseleave', function () { tip.style.display = 'none'; });
    mcells.push(e);
    return e;
  }
  function methodRecolour() {
    var range = {};
    mcells.forEach(function (c) {
      var v = c._job[metric], g = range[c._job.mode] = range[c._job.mode] || [Infinity, -Infinity];
      if (v !== null && isFinite(v)) { g[0] = Math.min(g[0], v); g[1] = Math.max(g[1], v); }
    });
    mcells.forEach(function (c) {
      var v = c._job[metric], g = range[c._job.mode];
      c.setAttribute('data-shown', v === null || v === undefined ? '' : String(v));
      c.setAttribute('fill', colour(v, g[0], g[1]));
      c.querySelector('title').textContent = mhover(c._job);
    });
    document.querySelectorAll('.method-legend').forEach(function (l) {
      var rg = range[l.getAttribute('data-mode')] || [NaN, NaN];
      l.setAttribute('data-lo', String(rg[0]));
      l.setAttribute('data-hi', String(rg[1]));
      l.textContent = METRICS[metric].label + ', one scale for every method and format of ' +
          'this mode: ' + fmt(rg[0]) + ' (' + (METRICS[metric].high_is_bad ? 'light' : 'dark red') +
          ') to ' + fmt(rg[1]) + ' (' + (METRICS[metric].high_is_bad ? 'dark red' : 'light') + ')';
    });
  }
  function methods() {
    if (!D.methods || !D.methods.length) return;
    var figs = {}, forder = [];
    D.methods.forEach(function (j) {
      var key = [j.model, j.format, j.format_options, j.quantize, j.mode].join(' | ');
      if (!figs[key]) { figs[key] = []; forder.push(key); }
      figs[key].push(j);
    });
    // the figures drawn: groups that hold more than one setting (method and options)
    var shown = forder.filter(function (key) {
      var m = {};
      figs[key].forEach(function (j) { m[j.method + ' ' + j.method_options] = true; });
      return Object.keys(m).length > 1;
    });
    if (!shown.length) return;
    root.appendChild(el('h3', {}, 'Methods side by side (component x method)'));
    shown.forEach(function (key) {
      var jobs = figs[key], first = jobs[0], cols = [], label = {}, order = {}, parts = [];
      jobs.forEach(function (j) {
        j._col = j.method + ' ' + j.method_options;
        if (cols.indexOf(j._col) < 0) {
          cols.push(j._col);
          label[j._col] = j.label;
          // as the columns of qsweep results: rtn first, then by method, a method before its
          // "+search", then by options
          order[j._col] = [j.method !== 'rtn', j.method,
                           JSON.parse(j.method_options || '{}').scale_search === true,
                           j.method_options];
        }
        if (parts.indexOf(j.part) < 0) parts.push(j.part);
      });
      cols.sort(function (a, b) {
        for (var i = 0; i < 4; i++) {
          var x = order[a][i], y = order[b][i];
          if (x !== y) return x < y ? -1 : 1;
        }
        return 0;
      });
      var pinfo = {};
      jobs.forEach(function (j) {
        var p = /^(\d+)\.(.+)$/.exec(j.part);
        pinfo[j.part] = p ? [+p[1], KINDS.indexOf(p[2])] : [-1, KINDS.indexOf(j.part)];
      });
      parts.sort(function (a, b) {
        var x = pinfo[a], y = pinfo[b];
        return x[0] - y[0] || (x[1] < 0 ? 99 : x[1]) - (y[1] < 0 ? 99 : y[1]) ||
            (a < b ? -1 : a > b ? 1 : 0);
      });
      var longest = 0;
      cols.forEach(function (c) { longest = Math.max(longest, label[c].length); });
      var cw = Math.max(60, 7 * longest + 8), ch = 18, left = 80, top = 22;
      var s = sv('svg', {width: left + cw * cols.length + 10, height: top + ch * parts.length + 6,
                         class: 'method-heatmap'});
      cols.forEach(function (c, i) {
        s.appendChild(sv('text', {x: left + i * cw + cw / 2, y: 14, 'text-anchor': 'middle'},
                         label[c]));
      });
      parts.forEach(function (p, i) {
        s.appendChild(sv('text', {x: left - 6, y: top + i * ch + ch - 5, 'text-anchor': 'end'},
                         first.mode === 'block' ? 'block ' + p : p));
      });
      jobs.forEach(function (j) {
        s.appendChild(mcell(left + cols.indexOf(j._col) * cw, top + parts.indexOf(j.part) * ch,
                            cw, ch, j));
      });
      var f = el('div', {class: 'figure methods', 'data-mode': first.mode,
                         'data-format': first.format});
      f.appendChild(el('div', {}, first.model + '  ' + first.format +
                                      (first.format_options !== '{}' ? ' ' + first.format_options
                                                                     : '') +
                                      '  quantize ' + first.quantize + ', ' + first.mode +
                                      ' mode, ' + cols.length + ' methods'));
      f.appendChild(s);
      f.appendChild(el('div', {class: 'method-legend note', 'data-mode': first.mode}));
      root.appendChild(f);
    });
    root.appendChild(query('methods'));
    methodRecolour();
  }

  function recolour() {
    methodRecolour();
    var groups = {};
    cells.forEach(function (c) {
      var g = scaleKey(c._job);
      (groups[g] = groups[g] || []).push(c._job[metric]);
    });
    var range = {};
    Object.keys(groups).forEach(function (g) {
      var v = groups[g].filter(function (x) { return x !== null && isFinite(x); });
      range[g] = [Math.min.apply(null, v), Math.max.apply(null, v)];
    });
    cells.forEach(function (c) {
      var j = c._job, v = j[metric], rg = range[scaleKey(j)];
      c.setAttribute('data-shown', v === null || v === undefined ? '' : String(v));
      c.setAttribute('fill', colour(v, rg[0], rg[1]));
      c.querySelector('title').textContent = hover(j);
    });
    var bar_max = {};
    bar_charts.forEach(function (ch) {
      ch.jobs.forEach(function (j) {
        var k = scaleKey(j);
        if (isFinite(j[metric])) bar_max[k] = Math.max(bar_max[k] || 0, Math.abs(j[metric]));
      });
    });
    bar_charts.forEach(function (ch) {
      var max = ch.jobs.length ? bar_max[scaleKey(ch.jobs[0])] || 0 : 0;
      ch.rects.forEach(function (r, i) {
        var v = ch.jobs[i][metric];
        var w = max > 0 && isFinite(v) ? Math.max(1, ch.width * Math.abs(v) / max) : 1;
        r.setAttribute('width', w);
        ch.labels[i].setAttribute('x', 90 + w + 4);
        ch.labels[i].textContent = fmt(v);
      });
    });
    document.querySelectorAll('.legend').forEach(function (l) {
      var rg = range[scale === 'shared' ? l.getAttribute('data-mode')
                                        : l.getAttribute('data-group')] || [NaN, NaN];
      l.textContent = METRICS[metric].label + ': ' + fmt(rg[0]) + ' (' +
          (METRICS[metric].high_is_bad ? 'light' : 'dark red') + ') to ' + fmt(rg[1]) + ' (' +
          (METRICS[metric].high_is_bad ? 'dark red' : 'light') + ')';
    });
  }

  // ---- pipeline: sweeps of trained models (v_pipeline_summary). One figure per (shape, steps,
  // lr, mode): a row per part, a column group per (format, options, quantize), a column per
  // training recipe within it; a cell ("pcell") is the mean over seeds, its min..max on hover.
  // Colours are scaled within each column group, so the recipes of a group compare directly.
  var PIPE = ['kl_mean', 'delta_ppl', 'rel_delta_ppl', 'kl_p99', 'top1'];
  var pcells = [];
  // the pipeline's figures have no SQNR: that choice shows mean KL there
  function pipeMetric() { return PIPE.indexOf(metric) >= 0 ? metric : 'kl_mean'; }
  function pipeHover(r) {
    return r.part + '  ' + r.recipe + '  ' + r.format + ' ' + r.quantize + ', mean over ' +
        r.seeds + ' seed(s), min..max:\n' + PIPE.map(function (k) {
          return (k === pipeMetric() ? '> ' : '  ') + k + ' = ' + fmt(r[k]) + '  (' +
              fmt(r[k + '_min']) + '..' + fmt(r[k + '_max']) + ')';
        }).join('\n');
  }
  function pcell(x, y, w, h, r, group) {
    var a = {x: x, y: y, width: w, height: h, class: 'pcell', 'data-part': r.part,
             'data-recipe': r.recipe, 'data-format': r.format, 'data-options': r.options,
             'data-quantize': r.quantize, 'data-mode': r.mode, 'data-seeds': r.seeds};
    PIPE.forEach(function (k) {
      ['', '_min', '_max'].forEach(function (sfx) {
        var v = r[k + sfx];
        a['data-' + k + sfx] = v === null || v === undefined ? '' : String(v);
      });
    });
    var e = sv('rect', a);
    e._row = r;
    e._group = group;
    e.appendChild(sv('title', {}, pipeHover(r)));
    e.addEventListener('mousemove', function (ev) {
      tip.style.display = 'block';
      tip.style.left = (ev.clientX + 12) + 'px';
      tip.style.top = (ev.clientY + 12) + 'px';
      tip.textContent = pipeHover(r);
    });
    e.addEventListener('mouseleave', function () { tip.style.display = 'none'; });
    pcells.push(e);
    return e;
  }
  function pipeRecolour() {
    var k = pipeMetric(), range = {};
    pcells.forEach(function (c) {
      var v = c._row[k], g = range[c._group] = range[c._group] || [Infinity, -Infinity];
      if (v !== null && isFinite(v)) { g[0] = Math.min(g[0], v); g[1] = Math.max(g[1], v); }
    });
    var saved = metric;
    metric = k;  // colour() reads the direction (high is bad) of the current metric
    pcells.forEach(function (c) {
      var v = c._row[k], g = range[c._group];
      c.setAttribute('data-shown', v === null || v === undefined ? '' : String(v));
      c.setAttribute('fill', colour(v, g[0], g[1]));
      c.querySelector('title').textContent = pipeHover(c._row);
    });
    metric = saved;
    document.querySelectorAll('.pipe-legend').forEach(function (l) {
      l.textContent = 'cells: ' + METRICS[k === 'rel_delta_ppl' ? 'delta_ppl' : k].label +
          (k === 'rel_delta_ppl' ? ' (relative)' : '') + ', mean over seeds; hover for ' +
          'min..max; colours scaled within each format x quantize group';
    });
  }
  function pipeline() {
    if (D.pipeline === null || D.pipeline === undefined || !D.pipeline.length) return;
    root.appendChild(el('h3', {}, 'Damage per training recipe (pipeline)'));
    if (D.pipeline_training && D.pipeline_training.length)
      root.appendChild(table(D.pipeline_training, ['shape', 'steps', 'lr', 'recipe', 'seeds',
                                                   'finished', 'final_val_loss',
                                                   'final_val_loss_min', 'final_val_loss_max']));
    root.appendChild(query('pipeline_training'));
    var figs = {}, forder = [];
    D.pipeline.forEach(function (r) {
      var key = [r.shape, r.steps, r.lr, r.mode].join(' | ');
      if (!figs[key]) { figs[key] = []; forder.push(key); }
      figs[key].push(r);
    });
    forder.forEach(function (key) {
      var rows = figs[key], first = rows[0], parts = [], pinfo = {}, groups = [], recipes = [];
      var glabel = {}, opts = {};
      rows.forEach(function (r) { opts[r.options] = true; });
      var one_opts = Object.keys(opts).length === 1;  // then the figure's title names them
      rows.forEach(function (r) {
        var g = r.format + ' ' + r.options + ' ' + r.quantize;
        r._g = g;
        if (groups.indexOf(g) < 0) {
          groups.push(g);
          glabel[g] = [r.format + (one_opts || r.options === '{}' ? '' : ' ' + r.options),
                       r.quantize];
        }
        if (recipes.indexOf(r.recipe) < 0) recipes.push(r.recipe);
        if (!pinfo[r.part]) { pinfo[r.part] = r; parts.push(r.part); }
      });
      var big = 1e9;
      parts.sort(function (a, b) {
        var x = pinfo[a], y = pinfo[b];
        return (x.block === null ? big : x.block) - (y.block === null ? big : y.block) ||
            (x.kind_pos === null ? big : x.kind_pos) - (y.kind_pos === null ? big : y.kind_pos) ||
            (a < b ? -1 : a > b ? 1 : 0);
      });
      recipes.sort(function (a, b) {
        return (a !== 'bf16') - (b !== 'bf16') || (a < b ? -1 : a > b ? 1 : 0);
      });
      var longest = 0;
      recipes.forEach(function (r) { longest = Math.max(longest, r.length); });
      parts.forEach(function (p) { longest = Math.max(longest, p.length / 2); });
      var cw = Math.max(44, 7 * longest + 8), ch = 18, gap = 14, left = 80, top = 50;
      groups.forEach(function (g) {
        var w = 6.5 * Math.max(glabel[g][0].length, glabel[g][1].length);
        cw = Math.max(cw, Math.ceil(w / recipes.length));
      });
      var gw = cw * recipes.length + gap;
      var s = sv('svg', {width: left + gw * groups.length + 10, height: top + ch * parts.length + 6,
                         class: 'pipeline-heatmap'});
      groups.forEach(function (g, gi) {
        glabel[g].forEach(function (t, li) {
          s.appendChild(sv('text', {x: left + gi * gw + (gw - gap) / 2, y: 12 + 13 * li,
                                    'text-anchor': 'middle', class: 'pgroup'}, t));
        });
        recipes.forEach(function (r, ri) {
          s.appendChild(sv('text', {x: left + gi * gw + ri * cw + cw / 2, y: 42,
                                    'text-anchor': 'middle'}, r));
        });
      });
      parts.forEach(function (p, pi) {
        s.appendChild(sv('text', {x: left - 6, y: top + pi * ch + ch - 5, 'text-anchor': 'end'},
                         first.mode === 'block' ? 'block ' + p : p));
      });
      rows.forEach(function (r) {
        var gi = groups.indexOf(r._g);
        s.appendChild(pcell(left + gi * gw + recipes.indexOf(r.recipe) * cw,
                            top + parts.indexOf(r.part) * ch, cw, ch, r, key + ' | ' + r._g));
      });
      var f = el('div', {class: 'figure pipeline', 'data-mode': first.mode});
      f.appendChild(el('div', {}, first.shape + ' (' + first.steps + ' steps, lr ' +
                                      fmt(first.lr) + ')  ' + first.mode + ' mode, ' +
                                      recipes.length + ' recipe(s)' +
                                      (one_opts && first.options !== '{}'
                                           ? ', format options ' + first.options : '')));
      f.appendChild(s);
      f.appendChild(el('div', {class: 'pipe-legend note'}));
      root.appendChild(f);
    });
    root.appendChild(query('pipeline'));
    pipeRecolour();
    root.appendChild(el('h3', {}, 'Each sweep job'));
  }

  // ---- header: experiment, run conditions, baseline
  root.appendChild(el('h1', {}, 'qsweep report: ' + D.experiment.name));
  if (D.experiment.description) root.appendChild(el('p', {}, D.experiment.description));
  root.appendChild(el('p', {class: 'note'}, 'created ' + D.experiment.created_at +
                                                '; report written ' + D.generated_at +
                                                ' by qsweep ' + D.qsweep_version));
  root.appendChild(el('h3', {}, 'Baseline and run conditions'));
  if (D.conditions.length)
    root.appendChild(table(D.conditions, ['model', 'baseline_job', 'baseline_ppl',
                                          'ctx', 'max_chunks', 'n_chunks', 'n_scored',
                                          'numerics_version', 'dataset']));
  else root.appendChild(el('p', {class: 'note'}, 'no baseline result yet'));
  root.appendChild(query('conditions'));

  // ---- progress and failures
  root.appendChild(el('h2', {}, 'Progress and failures'));
  root.appendChild(table(D.progress ? [D.progress] : [],
                         ['total', 'pending', 'running', 'succeeded', 'failed', 'cancelled']));
  root.appendChild(query('progress'));
  if (D.failed.length) {
    root.appendChild(el('h3', {class: 'bad'}, D.failed.length + ' failed job(s)'));
    root.appendChild(table(D.failed, ['job_id', 'kind', 'attempts_used', 'max_attempts',
                                      'last_outcome', 'last_worker', 'last_error']));
  } else {
    root.appendChild(el('p', {}, 'no failed jobs'));
  }
  root.appendChild(query('failed'));
  if (D.paths.length > 1) {
    root.appendChild(el('h3', {class: 'bad'}, 'mixed numerics: the jobs ran on ' +
                                              D.paths.length + ' numerics paths'));
    root.appendChild(el('p', {class: 'note'}, 'results of different paths (CPU kernel ' +
                                              'families, GPU GEMM paths) differ in their last ' +
                                              'digits; each path\'s jobs are a sweep of ' +
                                              'their own (numerics_path in their options), ' +
                                              'never ranked against another path\'s'));
    root.appendChild(table(D.paths, ['path', 'jobs']));
    root.appendChild(query('paths'));
  }

  // ---- sensitivity
  var groups = {}, order = [];
  D.sensitivity.forEach(function (j) {
    var key = [j.model, j.format, j.options, j.quantize].join(' | ');
    j.group = key + ' | ' + j.mode;
    if (!groups[key]) { groups[key] = {}; order.push(key); }
    (groups[key][j.mode] = groups[key][j.mode] || []).push(j);
  });
  var training = (D.experiment.kinds || []).indexOf('train') >= 0;
  var has_pipeline = D.pipeline !== null && D.pipeline !== undefined && D.pipeline.length > 0;
  // a section with nothing in it is left out: a training experiment without sensitivity jobs
  // shows no Sensitivity section, a sweep without training curves no Training section
  var sensitivity_shown = order.length > 0 || has_pipeline || !training;
  var sensitivity_root = root;
  if (!sensitivity_shown) root = el('div', {});
  root.appendChild(el('h2', {}, 'Sensitivity'));
  var sel = el('select', {id: 'metric'});
  Object.keys(METRICS).forEach(function (k) {
    var o = el('option', {value: k}, METRICS[k].label);
    if (k === metric) o.selected = true;
    sel.appendChild(o);
  });
  sel.addEventListener('change', function () {
    metric = sel.value;
    history.replaceState(null, '', '#metric=' + metric + (scale === 'chart' ? '&scale=chart' : ''));
    recolour();
    pipeRecolour();
  });
  var ssel = el('select', {id: 'scale'});
  [['shared', 'one per metric, across formats'], ['chart', 'each figure its own']]
      .forEach(function (o) {
        var opt = el('option', {value: o[0]}, o[1]);
        if (o[0] === scale) opt.selected = true;
        ssel.appendChild(opt);
      });
  ssel.addEventListener('change', function () {
    scale = ssel.value;
    history.replaceState(null, '', '#metric=' + metric + (scale === 'chart' ? '&scale=chart' : ''));
    recolour();
  });
  var p = el('p', {}, 'colour: ');
  p.appendChild(sel);
  p.appendChild(document.createTextNode(' scale: '));
  p.appendChild(ssel);
  p.appendChild(el('span', {class: 'note'}, ' (hover a cell for its values; the legend under ' +
                                                'each figure gives its scale)'));
  root.appendChild(p);
  pipeline();
  methods();
  if (!order.length)
    root.appendChild(el('p', {class: 'note'}, training
        ? 'no sensitivity jobs: this is a training experiment (' +
              (D.progress ? D.progress.succeeded + ' of ' + D.progress.total + ' runs done' : '') +
              '); its loss curves and final metrics are under Training below'
        : 'no eval results yet'));
  order.forEach(function (key) {
    var g = groups[key], first = g[Object.keys(g)[0]][0];
    root.appendChild(el('h3', {}, first.model + '  ' + first.format +
                                      (first.options !== '{}' ? ' ' + first.options : '') +
                                      '  quantize ' + first.quantize));
    var MODES = ['layer', 'component', 'block', 'cumulative', 'leave_one_out',
                 'leave_one_out_layer', 'leave_one_out_block'];
    Object.keys(g).sort(function (a, b) {
      var ia = MODES.indexOf(a), ib = MODES.indexOf(b);
      return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || (a < b ? -1 : 1);
    }).forEach(function (mode) {
      var jobs = g[mode], f = el('div', {class: 'figure', 'data-mode': mode});
      f.appendChild(el('div', {}, mode + ' mode, ' + jobs.length + ' job(s)'));
      var svg = (mode === 'layer' || mode === 'leave_one_out_layer') ? heatmap(jobs)
              : (mode === 'block' || mode === 'cumulative' || mode === 'leave_one_out_block')
                  ? strip(jobs) : bars(jobs);
      f.appendChild(svg);
      f.appendChild(el('div', {class: 'legend note', 'data-group': jobs[0].group,
                               'data-mode': mode}));
      root.appendChild(f);
    });
  });
  root.appendChild(query('sensitivity'));
  recolour();
  root = sensitivity_root;

  // ---- training: rendered when the training views exist (v_train_curves, v_train_final)
  // and the experiment trains or has curves
  var has_curves = D.train_curves !== null && D.train_curves !== undefined &&
                   D.train_curves.length > 0;
  var training_shown = training || has_curves || !!D.train_error;
  if (training_shown) root.appendChild(el('h2', {}, 'Training'));
  if (!training_shown) {
    // a sweep without training curves: no Training section
  } else if (D.train_curves === null) {
    root.appendChild(el('p', {class: 'note'}, 'this database has no training views ' +
                                                  '(v_train_curves, v_train_final)'));
  } else {
    if (D.train_error) root.appendChild(el('p', {class: 'bad'}, D.train_error));
    // one chart per metric (train_loss, val_loss): a line per (recipe, shape, lr), the mean
    // over seeds, with its min..max band
    var charts = {};
    D.train_curves.forEach(function (r) {
      var c = charts[r.metric] = charts[r.metric] || {};
      var key = r.recipe + '  ' + r.shape + '  lr ' + fmt(r.lr);
      (c[key] = c[key] || []).push(r);
    });
    if (!Object.keys(charts).length)
      root.appendChild(el('p', {class: 'note'}, training
          ? 'no training curves yet (see the progress and failed jobs above)'
          : 'no training curves in this experiment'));
    Object.keys(charts).sort().forEach(function (metricName) {
      var lines = charts[metricName], keys = Object.keys(lines).sort();
      var W = 640, H = 300, L = 50, xmax = 0, ymin = Infinity, ymax = -Infinity;
      keys.forEach(function (k) {
        lines[k].forEach(function (p) {
          xmax = Math.max(xmax, p.step); ymin = Math.min(ymin, p.lo); ymax = Math.max(ymax, p.hi);
        });
      });
      var X = function (s) { return L + (xmax > 0 ? s / xmax : 0) * (W - L - 10); };
      var Y = function (v) { return 10 + (ymax > ymin ? (ymax - v) / (ymax - ymin) : 0.5) * (H - 40); };
      var s = sv('svg', {width: W + 260, height: H, class: 'curves', 'data-metric': metricName});
      var hues = [210, 10, 120, 280, 40, 170, 330];
      keys.forEach(function (k, i) {
        var col = 'hsl(' + hues[i % hues.length] + ',70%,45%)', P = lines[k];
        var band = P.map(function (p) { return X(p.step) + ',' + Y(p.hi); })
            .concat(P.slice().reverse().map(function (p) { return X(p.step) + ',' + Y(p.lo); }));
        s.appendChild(sv('polygon', {points: band.join(' '), fill: col, 'fill-opacity': 0.15}));
        var line = sv('polyline', {points: P.map(function (p) { return X(p.step) + ',' + Y(p.mean); }).join(' '),
                                   fill: 'none', stroke: col, 'stroke-width': 1.5, class: 'curve',
                                   'data-line': k});
        line.appendChild(sv('title', {}, k + ': ' + P.length + ' steps, last mean ' +
                                             fmt(P[P.length - 1].mean) + ' over ' +
                                             P[P.length - 1].seeds + ' seed(s)'));
        s.appendChild(line);
        s.appendChild(sv('text', {x: W + 4, y: 20 + 16 * i, style: 'fill:' + col}, k));
      });
      s.appendChild(sv('text', {x: L, y: H - 8}, metricName + ' against step 0..' + xmax + ': ' +
                                                      fmt(ymin) + '..' + fmt(ymax) +
                                                      ' (mean over seeds, band min..max)'));
      root.appendChild(el('h3', {}, metricName));
      root.appendChild(s);
    });
    root.appendChild(query('train_curves'));
    if (D.train_final && D.train_final.length) {
      root.appendChild(el('h3', {}, 'Final metrics and gap to the bf16 run'));
      root.appendChild(table(D.train_final, ['metric', 'shape', 'recipe', 'lr', 'seeds', 'mean',
                                             'sd', 'gap_to_bf16', 'rel_gap_to_bf16']));
    }
    root.appendChild(query('train_final'));
  }
  document.body.setAttribute('data-rendered', String(cells.length));
  document.body.setAttribute('data-pipeline-cells', String(pcells.length));
  document.body.setAttribute('data-method-cells', String(mcells.length));
})();
