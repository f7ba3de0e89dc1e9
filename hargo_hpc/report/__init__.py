"""`hargo report RUN_DIR...`: the method table of the project and its plots (docs/report.md).

`table` reads run directories into rows (pure: JSON and TOML only), `plots` draws the PNGs
(matplotlib, imported only when plotting), `page` puts both into one self-contained HTML file,
the command is `cli/report.py`. Nothing here imports torch: it runs on a login node.
"""
