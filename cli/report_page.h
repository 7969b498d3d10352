/* The static parts of the HTML report of `qsweep report` (cmd_report.c): style and script.
 * The page is one self-contained file: no network, no CDN. Its data is one JSON object in
 * <script type="application/json" id="qsweep-data">, written by cmd_report.c from the views
 * (schema/002_views.sql, 006_sqnr_view.sql), which the script below renders as inline SVG.
 *
 * DOM contract (read by tests/report): every eval job with results is exactly one SVG element
 * of class "cell" (a heatmap cell, a bar or a strip cell) carrying data-job (jobs.id),
 * data-part, one data-<metric> attribute per metric (kl_mean, delta_ppl, kl_p99, top1,
 * sqnr_db; the view's value as JavaScript prints a double, shortest round-trip, or "" when
 * NULL) and data-shown, the value of the metric the page colours by. The colour metric is
 * chosen in the page, or with "#metric=NAME" in the URL.
 *
 * A pipeline (sweeps of trained models, schema/130_pipeline_views.sql) adds, under the
 * "pipeline-heatmap" SVGs, one element of class "pcell" per row of the report's "pipeline"
 * query ((shape, steps, lr, mode) figure, (format, options, quantize) column group, part,
 * recipe): data-part, data-recipe, data-format, data-options, data-quantize, data-mode,
 * data-seeds, for each of kl_mean, delta_ppl, rel_delta_ppl, kl_p99 and top1 the attributes
 * data-<metric>, data-<metric>_min and data-<metric>_max (the mean, min and max over seeds),
 * data-shown (the mean of the colour metric; kl_mean when that is sqnr_db) and a <title> with
 * every mean and its min..max. <body data-pipeline-cells> is their count.
 *
 * Methods side by side: for each (model, format, format options, quantize, mode) of the
 * "methods" query that holds more than one method (kinds/method.h), a "method-heatmap" SVG,
 * a row per part and a column per method, one element of class "mcell" per job: data-job,
 * data-part, data-method, data-format, data-quantize, data-mode, data-<metric> for each metric
 * above and data-shown. Their colours share one scale per mode across every method and format;
 * the "method-legend" under each figure gives it (data-mode, data-lo, data-hi).
 * <body data-method-cells> is their count. */
#ifndef QSWEEP_REPORT_PAGE_H
#define QSWEEP_REPORT_PAGE_H

/* <style> contents. */
extern const char qsweep_report_css[];

/* <script> contents: renders the data object into #report. */
extern const char qsweep_report_js[];

#endif
