"""Parses an SVG file with xml.etree (a strict XML parser) and prints a JSON
summary of the structure that attention_render_test.cc checks:
root tag, size, titles, number of cells per panel, row and column labels,
whether column labels are rotated, color bars, and the distinct cell colors.
Exits non-zero (with the parser's message) when the file is not well-formed.
"""
import json
import sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"


def main():
    root = ET.parse(sys.argv[1]).getroot()
    panels = []
    for g in root.iter(NS + "g"):
        if g.get("class") != "panel":
            continue
        texts = list(g.iter(NS + "text"))
        cells = [r for r in g.iter(NS + "rect") if r.get("class") == "cell"]
        panels.append({
            "title": [t.text for t in texts if t.get("class") == "title"],
            "cells": len(cells),
            "cell_tooltips": [c.find(NS + "title").text for c in cells[:3]],
            "colors": sorted({c.get("fill") for c in cells}),
            "row_labels": [t.text for t in texts if t.get("class") == "row-label"],
            "col_labels": [t.text for t in texts if t.get("class") == "col-label"],
            "col_rotated": all("rotate(" in (t.get("transform") or "")
                               for t in texts if t.get("class") == "col-label"),
            "colorbars": sum(1 for r in g.iter(NS + "rect") if r.get("class") == "colorbar"),
            "scale_labels": [t.text for t in texts if t.get("class") == "scale-label"],
        })
    print(json.dumps({
        "root": root.tag,
        "width": root.get("width"),
        "gradients": len(list(root.iter(NS + "linearGradient"))),
        "panels": panels,
    }, ensure_ascii=False))


if __name__ == "__main__":
    main()
