/*
 * html.h — the interactive timeline page: one self-contained HTML file (no network, no external
 * script or style) that draws panels (planner/panels.h) as SVG on one shared time axis, with a
 * memory track per stage under each panel, hover for an op's micro-batch, size, start, end and
 * its stage's memory, and a time cursor to step through ops (Step, Back) or play.
 *
 * The page carries the panels as JSON in a <script type="application/json" id="dpsim-data">
 * element and draws them on load; each op is an SVG <rect class="op"> with data-panel, data-stage,
 * data-mb, data-op attributes (the browser test counts them against the plan's ops).
 *
 * Opened as PAGE.html#stepN it starts at time 0 and steps N times (the browser test's way to
 * press Step); the body then carries data-ops (boxes drawn), data-now (the cursor, ms) and
 * data-later (boxes after the cursor).
 *
 * Writes atomically (common/outfile.h): a failed write leaves an earlier file as it was.
 */
#ifndef HTML_H
#define HTML_H

#include "../common/dp.h"
#include "../planner/panels.h"

/* Writes the n panels (times in ms, memory in MB) under title (not NULL) to path ("-": stdout).
 * DP_ERR_NOMEM, or DP_ERR_IO naming the path; an earlier file at path is then as it was. */
dp_status html_write_panels(const panel *ps, int n, const char *title, const char *path, dp_err *err);

#endif /* HTML_H */
