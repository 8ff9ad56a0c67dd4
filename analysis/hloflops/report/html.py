"""`hloflops FILE --html PATH`: one self-contained page (inline CSS and JS, no network) with the
summary, the loops and an interactive icicle chart of the exact FLOPs by scope.

The chart is a tree of op_name frames. Each cell is as wide as its share of the metric; a
hatched band at its right end is the part that is remat recomputation; `xN` after a name says how many
times its instructions run per step (the loop trip counts multiplied out). Click a cell to zoom
into it, click the top cell to zoom out; `page.html#focus=<path>` opens zoomed in (the path is
the cell names from the root joined by U+241F, URL-encoded; the address bar follows your clicks).
"""

from __future__ import annotations

import html
import json
from typing import TYPE_CHECKING, Any

from hloflops.report.communication import sharded_lines
from hloflops.report.conditionals import range_lines
from hloflops.report.format import format_table, ratio
from hloflops.report.formulas import formula_lines
from hloflops.report.reconciliation import reconciliation_lines
from hloflops.scopes import NO_SCOPE, split_scope

if TYPE_CHECKING:
    from hloflops.report.report import Report


def scope_tree(report: Report, depth: int | None = None) -> dict[str, Any]:
    """The icicle's data: nested nodes {"n": name, "v": [flops, transcendentals, bytes,
    remat_flops], "x": [min, max executions], "c": [children]}; inclusive values, children sorted
    by FLOPs (largest first) then name; all-zero subtrees dropped."""
    root: dict[str, Any] = {"n": report.module_name or "module", "v": [0, 0, 0, 0], "x": None, "c": {}}
    for row in report.rows:
        frames = split_scope(row.scope) or (NO_SCOPE,)
        frames = (*frames[:depth], row.opcode) if depth else (*frames, row.opcode)
        values = (row.total.flops, row.total.transcendentals, row.total.bytes_accessed,
                  row.remat_flops)
        if not any(values):
            continue
        node = root
        for frame in (None, *frames):
            if frame is not None:
                children = node["c"]
                node = children.get(frame)
                if node is None:
                    node = children[frame] = {"n": frame, "v": [0, 0, 0, 0], "x": None, "c": {}}
            node["v"] = [a + b for a, b in zip(node["v"], values)]
            lo_hi = node["x"]
            node["x"] = [row.executions, row.executions] if lo_hi is None else [
                min(lo_hi[0], row.executions), max(lo_hi[1], row.executions)]

    def finish(node: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"n": node["n"], "v": node["v"], "x": node["x"] or [0, 0]}
        kids = sorted(node["c"].values(), key=lambda k: (-k["v"][0], -k["v"][2], k["n"]))
        if kids:
            out["c"] = [finish(k) for k in kids]
        return out

    return finish(root)


def _cell(text: str) -> str:
    numeric = text[:1].isdigit() or text[:1] in "+-" or text == "UNKNOWN"
    return f"<td>{html.escape(text)}</td>" if numeric else f"<td class='t'>{html.escape(text)}</td>"


def _table(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(_cell(c) for c in r) + "</tr>" for r in rows)
    # the wrapper scrolls sideways inside its box: a wide table does not run off the page
    return f"<div class='scroll'><table class='{cls}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{share * 100:.1f}%"


def _summary_html(report: Report) -> str:
    xla = report.xla_estimate
    parts = []
    if report.unknown_loops or report.uncounted or not getattr(report.accounting, "executions_known", True):
        parts.append("<p class='warn'>Totals are lower bounds: some trip counts or op costs are unknown.</p>")
    for line in range_lines(report):  # the program decides conditionals at run time: a range
        parts.append(f"<p class='warn'>{html.escape(line.removeprefix('NOTE: '))}</p>")
    rows = []
    for label, key, exact in (("flops", "flops", report.flops),
                              ("transcendentals", "transcendentals", report.transcendentals),
                              ("bytes accessed", "bytes_accessed", report.bytes_accessed)):
        r = ratio(exact, xla[key])
        rows.append([label, f"{exact:,}", f"{xla[key]:,.0f}", "-" if r is None else f"{r:.2f}x"])
    parts.append(_table(["", "exact (loop-aware)", "XLA cost_analysis", "exact / XLA"], rows, "totals"))
    overhead = report.remat_overhead
    phases = report.phase_flops
    parts.append(
        f"<p>model flops <b>{report.model_flops:,}</b>, remat flops <b>{report.remat_flops:,}</b>"
        + ("" if overhead is None else f" (remat overhead +{overhead * 100:.1f}%)")
        + "; phases: " + ", ".join(f"{p} {v:,}" for p, v in phases.items()) + "</p>"
    )
    if report.loops:
        loop_rows = [
            [lp.name, "UNKNOWN" if lp.trip_count is None else f"{lp.trip_count:,}", lp.source, f"{lp.executions:,}",
             f"{lp.total.flops:,}", _pct(report.loop_share(lp)),
             "?" if lp.trip_count is None else f"{lp.extra_over_xla.flops:,}", lp.parent or "",
             " ".join(filter(None, (report.loop_location(lp), report.loop_function(lp))))]
            for lp in report.loops
        ]
        parts.append("<h2>Loops</h2>")
        parts.append(_table(["loop", "trip count", "source", "executions", "flops", "share", "XLA misses", "inside",
                             "your code"], loop_rows, "loops"))
        # The summary's formula in the unknown trip counts, and its reconciliation rows (loops,
        # conditionals and residual adding up to exact - XLA), as it prints them.
        for cls, lines in (("formula", formula_lines(report.formula) if report.formula is not None else []),
                           ("reconciliation", reconciliation_lines(report))):
            if lines:
                parts.append(f"<pre class='{cls}'>{html.escape(chr(10).join(lines).strip())}</pre>")
    else:
        parts.append("<h2>Loops</h2><p>none</p>")
    functions = [g for g in report.by_function() if g.total.flops][:10]
    if functions:  # the user's functions (hloflops.user_code): where the FLOPs are in their code
        parts.append("<h2>FLOPs by function (your code)</h2>")
        parts.append(_table(["function", "flops", "share", "remat flops"],
                            [[g.key, f"{g.total.flops:,}", _pct(ratio(g.total.flops, report.flops)),
                              f"{g.remat_flops:,}"] for g in functions], "functions"))
    parts.append("<h2>Uncounted ops</h2>")
    if report.uncounted:
        parts.append(_table(["name", "opcode", "computation", "executions", "reason"],
                            [[u.name, u.opcode, u.computation, f"{u.executions:,}", u.reason]
                             for u in report.uncounted], "uncounted"))
    else:
        parts.append("<p>none</p>")
    return "\n".join(parts)


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:20px;margin:0 0 8px}h2{font-size:16px;margin:18px 0 6px}
table{border-collapse:collapse;margin:4px 0}td,th{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}
td:first-child,th:first-child,td.t{text-align:left}.warn{color:#b00;font-weight:bold}
#chart{width:100%;display:block;border:1px solid #ccc;background:#fafafa}
#chart text{font:11px monospace;pointer-events:none;fill:#111}
#chart .cell{cursor:pointer}#chart .cell:hover rect.node{stroke:#000;stroke-width:1}
#info{font:12px monospace;min-height:2.6em;white-space:pre-wrap;margin:4px 0}
.scroll,pre{max-width:100%;overflow-x:auto}
h1,h2,p{overflow-wrap:anywhere}
.legend span{display:inline-block;width:14px;height:10px;margin:0 4px 0 12px;vertical-align:middle}
"""

# Plain JS + SVG, no libraries: lay the tree out as an icicle (root on top), zoom on click.
_JS = r"""
(function () {
  var data = JSON.parse(document.getElementById('hloflops-data').textContent);
  var NS = 'http://www.w3.org/2000/svg', W = 1200, H = 18;
  var box = document.getElementById('chart').getBoundingClientRect();
  if (box && box.width > 100) W = Math.floor(box.width);
  var chart = document.getElementById('chart'), info = document.getElementById('info');
  var select = document.getElementById('metric');
  var names = ['flops', 'transcendentals', 'bytes accessed'];
  var metric = 0, focus = data.tree;
  (function link(n, p) { n.p = p; (n.c || []).forEach(function (k) { link(k, n); }); })(data.tree, null);
  function fmt(x) { return Number(x).toLocaleString('en-US'); }
  function path(n) { var s = []; for (; n; n = n.p) s.unshift(n.n); return s.join('/'); }
  // A label's xN says that every op under the node runs N times per step; where its ops run
  // different numbers of times (a loop and the code around it) no one number is the node's, so
  // the label has none and the tooltip gives the range of its ops' executions.
  function mult(n) {
    var lo = n.x[0], hi = n.x[1];
    return hi > 1 && lo === hi ? ' \u00d7' + fmt(lo) : '';
  }
  function runs(n) {
    var lo = n.x[0], hi = n.x[1];
    if (!n.p || hi <= 1) return '';
    return lo === hi ? ', runs' + mult(n) + ' per step'
                     : ', its ops run ' + fmt(lo) + ' to ' + fmt(hi) + ' times per step';
  }
  function color(n) {
    var h = 0;
    for (var i = 0; i < n.n.length; i++) h = (h * 31 + n.n.charCodeAt(i)) >>> 0;
    return 'hsl(' + (15 + h % 45) + ',' + (65 + h % 20) + '%,' + (58 + h % 14) + '%)';
  }
  function el(tag, attrs) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  }
  function describe(n) {
    var v = n.v, total = data.tree.v[metric];
    var share = total ? (100 * v[metric] / total).toFixed(2) + '%' : '-';
    return path(n) + '\n' + names[metric] + ' ' + fmt(v[metric]) + ' (' + share + ' of the module)' +
      (v[3] ? ', remat flops ' + fmt(v[3]) : '') + runs(n);
  }
  function render() {
    while (chart.firstChild) chart.removeChild(chart.firstChild);
    var defs = el('defs', {});
    var pat = el('pattern', {id: 'remat-hatch', width: 6, height: 6, patternUnits: 'userSpaceOnUse',
                             patternTransform: 'rotate(45)'});
    pat.appendChild(el('rect', {width: 6, height: 6, fill: '#c0392b', 'fill-opacity': 0.35}));
    pat.appendChild(el('line', {x1: 0, y1: 0, x2: 0, y2: 6, stroke: '#8e1b10', 'stroke-width': 3}));
    defs.appendChild(pat);
    chart.appendChild(defs);
    var cells = [], chain = [];
    for (var a = focus; a; a = a.p) chain.unshift(a);
    chain.forEach(function (n, i) { cells.push([n, 0, W, i]); });
    (function lay(n, x0, w, d) {
      var total = n.v[metric], x = x0;
      if (!total) return;
      (n.c || []).forEach(function (k) {
        var kw = w * k.v[metric] / total;
        if (kw >= 0.5) { cells.push([k, x, kw, d + 1]); lay(k, x, kw, d + 1); }
        x += kw;
      });
    })(focus, 0, W, chain.length - 1);
    var rows = 0;
    cells.forEach(function (c) { rows = Math.max(rows, c[3] + 1); });
    chart.setAttribute('viewBox', '0 0 ' + W + ' ' + rows * H);
    chart.setAttribute('height', rows * H);
    cells.forEach(function (c) {
      var n = c[0], x = c[1], w = c[2], d = c[3];
      var g = el('g', {'class': 'cell', transform: 'translate(' + x.toFixed(2) + ',' + d * H + ')'});
      g.appendChild(el('rect', {'class': 'node', width: Math.max(w - 0.5, 0.5).toFixed(2), height: H - 1,
                                fill: color(n), 'data-name': n.n, 'data-value': n.v[metric],
                                'data-remat': n.v[3], 'data-executions': n.x[1]}));
      if (metric === 0 && n.v[3] > 0 && n.v[0] > 0) {
        var rw = w * n.v[3] / n.v[0];  // the remat band sits at the right end, clear of the label
        g.appendChild(el('rect', {'class': 'remat', x: Math.max(w - rw, 0).toFixed(2), width: rw.toFixed(2),
                                  height: H - 1, fill: 'url(#remat-hatch)'}));
      }
      var title = el('title', {});
      title.textContent = describe(n);
      g.appendChild(title);
      // the root is the module: its name and total (a range of executions over all its ops says nothing)
      var label = n.p ? n.n + mult(n) : n.n + ': ' + fmt(n.v[metric]) + ' ' + names[metric] + ' in all',
          room = Math.floor((w - 6) / 6.6);
      if (room >= 3) {
        var t = el('text', {x: 3, y: H - 5});
        t.textContent = label.length > room ? label.slice(0, room - 1) + '\u2026' : label;
        g.appendChild(t);
      }
      g.addEventListener('click', function () { focus = (n === focus && n.p) ? n.p : n; render(); });
      g.addEventListener('mouseover', function () { info.textContent = describe(n); });
      chart.appendChild(g);
    });
    document.body.setAttribute('data-rendered-cells', String(cells.length));
  }
  // '#focus=<path>' in the address zooms in on that cell (a link to a part of the chart)
  function find(p) {
    var node = data.tree, parts = p.split('\u241f');
    if (parts[0] !== node.n) return null;
    for (var i = 1; i < parts.length && node; i++) {
      node = (node.c || []).filter(function (k) { return k.n === parts[i]; })[0];
    }
    return node || null;
  }
  function keyOf(n) { var s = []; for (; n; n = n.p) s.unshift(n.n); return s.join('\u241f'); }
  function fromHash() {
    var m = /^#focus=(.*)$/.exec(window.location.hash);
    var path = null;
    // a malformed address (`#focus=%E0%A4%A`) makes decodeURIComponent throw: show the whole chart
    try { path = m ? decodeURIComponent(m[1]) : null; } catch (e) { path = null; }
    var found = path !== null ? find(path) : null;
    focus = found || data.tree;
  }
  var plainRender = render;
  render = function () {
    plainRender();
    var hash = focus === data.tree ? '' : '#focus=' + encodeURIComponent(keyOf(focus));
    if (window.location.hash !== hash && window.history && window.history.replaceState) {
      try { window.history.replaceState(null, '', hash || window.location.pathname); } catch (e) { /* file:// */ }
    }
    document.body.setAttribute('data-focus', focus.n);
  };
  select.addEventListener('change', function () { metric = Number(select.value); render(); });
  window.addEventListener('hashchange', function () { fromHash(); render(); });
  fromHash();
  render();
})();
"""


def _json_for_script(value: Any) -> str:
    # Inside <script> the text must never contain '</script' or '<!--': escape every '<', '>' and '&'.
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _sharded_html(report: Report, chip: Any) -> str:
    lines = sharded_lines(report, chip)
    return f"<h2>Communication and time</h2>\n<pre>{html.escape(chr(10).join(lines))}</pre>" if lines else ""


def render_html(report: Report, *, depth: int | None = None, top: int = 20, chip: Any = None,
                preamble_html: str = "", chart_only: bool = False) -> str:
    """The page; `preamble_html` goes right under the title (`hloflops run` puts its modules table
    there); `chart_only` leaves out everything but the chart (the notebook view's frame)."""
    title = f"hloflops: {report.module_name}"
    data = {"module": report.module_name, "flops": report.flops, "tree": scope_tree(report, depth)}
    opcode_rows = [[g.key, f"{g.total.flops:,}", _pct(ratio(g.total.flops, report.flops)), f"{g.remat_flops:,}",
                    f"{g.total.bytes_accessed:,}"] for g in report.by_opcode()[:top]]
    text_summary = "\n".join(format_table(["opcode", "flops", "share", "remat flops", "bytes"], opcode_rows))
    if chart_only:
        return _page(title, _CHART + _data_and_script(data))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{_CSS}</style></head>
<body>
<h1>{html.escape(title)}</h1>{preamble_html}
<p>{html.escape(report.path or "")}</p>
{_summary_html(report)}
{_CHART}<h2>By opcode</h2>
<pre>{html.escape(text_summary)}</pre>
{_sharded_html(report, chip)}
{_data_and_script(data)}
</body></html>
"""


_CHART = """<h2>FLOPs by scope</h2>
<p class="legend">Width: share of <select id="metric"><option value="0">flops</option>
<option value="1">transcendentals</option><option value="2">bytes accessed</option></select>
<span style="background:#c0392b;opacity:.5"></span>hatched: remat recomputation
&nbsp; &times;N: every op under the node runs N times per step (loop trip counts; where they differ, the
tooltip gives the range). Click to zoom.</p>
<div id="info"></div>
<svg id="chart" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="icicle chart of FLOPs by scope"></svg>
"""


def _data_and_script(data: dict[str, Any]) -> str:
    return (f'<script type="application/json" id="hloflops-data">{_json_for_script(data)}</script>\n'
            f"<script>{_JS}</script>")


def _page(title: str, body: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>\n'
            f"<style>{_CSS}</style></head>\n<body>\n{body}\n</body></html>\n")


def _tree_depth(node: dict[str, Any]) -> int:
    return 1 + max((_tree_depth(k) for k in node.get("c", ())), default=0)


def render_notebook(report: Report, *, depth: int | None = None, top: int = 10) -> str:
    """What `Report._repr_html_` shows in a notebook: the summary as the CLI prints it (totals
    next to XLA's, model and remat FLOPs, phases, every loop with its trip count, source, share
    and what XLA misses, uncounted ops), the top scopes, and the interactive chart. The chart
    page sits in an iframe of its own, so its script and element ids cannot collide with the
    notebook's or with another report's."""
    head = f"<b>{html.escape(report.module_name)}</b>" + (f" ({html.escape(report.path)})" if report.path else "")
    scopes = [[g.key, f"{g.total.flops:,}", _pct(ratio(g.total.flops, report.flops)), f"{g.remat_flops:,}"]
              for g in report.by_scope(3)[:top]]
    chart = render_html(report, depth=depth, chart_only=True)
    rows = _tree_depth(scope_tree(report, depth))
    height = 150 + 18 * rows  # the heading, legend and info line, then one band per level of the icicle
    frame = (f"<iframe srcdoc=\"{html.escape(chart, quote=True)}\" style=\"width:100%;height:{height}px;"
             f"border:1px solid #ddd\" sandbox=\"allow-scripts\" title=\"hloflops chart\"></iframe>")
    return (f"<div class='hloflops-report'>{head}{_summary_html(report)}"
            f"<h4>top {len(scopes)} scopes (depth 3)</h4>"
            + _table(["scope", "flops", "share", "remat flops"], scopes, "scopes") + frame + "</div>")
