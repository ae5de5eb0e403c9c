"""The pages' one stylesheet (inlined: the pages are self-contained)."""

CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;font-size:12px;margin:.6em 0}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:right;vertical-align:top}td{white-space:nowrap}
td.name{text-align:left;min-width:280px;max-width:560px;white-space:normal;overflow-wrap:anywhere}td.label{text-align:left}th{background:#f3f3f3;cursor:help}
.toggle input:not(:checked)~table .more{display:none}.headline td{white-space:normal}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{border:1px solid #ccc;padding:4px 10px;max-width:640px;font-size:13px}
pre{background:#f7f7f7;padding:8px;font-size:11px;white-space:pre-wrap;overflow-wrap:anywhere}
.warn{color:#a40}dl{display:grid;grid-template-columns:max-content auto;gap:2px 12px;font-size:13px}
dt{font-weight:600}dd{margin:0}details{margin:.6em 0}summary{cursor:pointer;color:#245}"""
