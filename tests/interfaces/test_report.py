"""The report's notebook pages: the throughput plot carries its alternative text into the HTML."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

import nbformat
import pytest
from nbconvert import HTMLExporter

from playbook.interfaces import tables as show
from playbook.runfolder.folder import RunFolder
from playbook.serialization import read_json
from playbook.verify.step import VerifyResult

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_RUN = ROOT / "outputs" / "reference" / "20261122T010438Z-vm"
NBCONVERT_NO_ALT = "No description has been provided for this image"  # nbconvert's stand-in, with its warning


def _plot_cell_outputs(result: VerifyResult, run: RunFolder) -> list:
    """Run the verify notebook's plot cell as written, its display() calls captured as notebook outputs."""
    notebook = json.loads((ROOT / "notebooks" / "verify.ipynb").read_text())
    [cell] = ["".join(c["source"]) for c in notebook["cells"] if "throughput.plot_files" in "".join(c["source"])]
    outputs = []

    def display(obj):
        data = {"text/plain": repr(obj)}
        for mime, method in (("text/html", "_repr_html_"), ("image/png", "_repr_png_")):
            if hasattr(obj, method) and (value := getattr(obj, method)()) is not None:
                data[mime] = value if isinstance(value, str) else base64.b64encode(value).decode()
        outputs.append(nbformat.v4.new_output("display_data", data=data))

    exec(cell, {"display": display, "show": show, "result": result, "run": run})  # noqa: S102 (our own notebook)
    return outputs


def test_the_verify_notebooks_plot_has_alternative_text_in_the_report_page():
    run = RunFolder(REFERENCE_RUN)
    result = read_json(VerifyResult, run.layout.verify_result(1))
    outputs = _plot_cell_outputs(result, run)
    assert outputs, "the plot cell displayed nothing"
    page = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("plot", outputs=outputs)])
    body, _ = HTMLExporter(template_name="basic").from_notebook_node(page)
    assert NBCONVERT_NO_ALT not in body
    assert 'alt="Throughput by layers offloaded to the GPU: token generation from 58.6 tokens/s at 0 layers' in body


def test_a_step_without_a_recorded_notebook_gets_no_link(tmp_path):
    """A step killed before its notebook was named (run.json "notebook": "") is listed without a link to ".html"."""
    import shutil

    from playbook.interfaces.report import write_report

    run_dir = tmp_path / REFERENCE_RUN.name
    shutil.copytree(REFERENCE_RUN, run_dir, ignore=shutil.ignore_patterns("report"))
    record = json.loads((run_dir / "run.json").read_text())
    record["steps"][-1]["notebook"] = ""
    (run_dir / "run.json").write_text(json.dumps(record))
    index = Path(write_report(run_dir)).read_text()
    assert 'href=".html"' not in index and "none recorded" in index
    assert 'href="01-detect.html"' in index


@pytest.mark.long
def test_the_report_is_written_where_nbconvert_is_not_installed(tmp_path):
    """The offline bundle carries what a headless run imports, not nbconvert: `playbook report` still writes every
    page, each notebook's code and outputs as plain HTML, the plot with its alternative text."""
    import shutil
    import subprocess
    import sys

    run_dir = tmp_path / REFERENCE_RUN.name
    shutil.copytree(REFERENCE_RUN, run_dir, ignore=shutil.ignore_patterns("report"))
    hide_nbconvert = ("import sys; sys.modules['nbconvert'] = None; from playbook.interfaces.cli import main; "
                      "sys.exit(main(['report', sys.argv[1]]))")
    out = subprocess.run([sys.executable, "-c", hide_nbconvert, str(run_dir)], capture_output=True, text=True,
                         timeout=300, cwd=ROOT, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    verify_page = (run_dir / "report" / "05-verify-attempt-1.html").read_text()
    notebook = nbformat.read(run_dir / "05-verify-attempt-1.ipynb", as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert html.escape(code[-1].source) in verify_page  # every cell's code, the last one too
    printed = next(o.text for c in code for o in c.outputs if o.output_type == "stream" and o.text.strip())
    assert html.escape(printed) in verify_page
    assert '<img src="data:image/png;base64,' in verify_page  # the plot
    assert (run_dir / "report" / "01-detect.html").is_file() and (run_dir / "report" / "index.html").is_file()
