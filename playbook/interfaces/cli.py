"""``playbook``: a thin command line over the chain, the run folder and the knowledge base.

Each command parses its arguments and calls one function; a :class:`PlaybookError` becomes one line
on stderr and the exit status its class names (:class:`playbook.errors.ExitCode`).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from playbook.errors import ExitCode, PlaybookError
from playbook.runfolder.layout import ATTESTATION, MANIFEST, REPORT_INDEX

DESCRIPTION = "Build llama-cpp-python with GPU acceleration, reproducibly."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="playbook", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    # One list of the commands: argparse's, from each command's help (a description listing them too showed them twice).
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")

    run = commands.add_parser("run", help="detect → configure → build (⇄ repair) → verify, each step an executed notebook in a new "
                                          "run folder under outputs/ (the build's provenance archive)")
    _add_params_options(run)
    run.add_argument("--output", default=None, metavar="FOLDER|s3://BUCKET/PREFIX",
                     help="folder that receives the run folder (default: $LLAMA_PLAYBOOK_OUTPUTS, else outputs/); "
                          "s3://bucket/prefix: the run executes in a temporary folder and is uploaded there")
    _add_chain_options(run)

    resume = commands.add_parser("resume", help="continue a run that was killed, from its last completed step")
    resume.add_argument("run_dir", type=Path)
    _add_chain_options(resume)

    plan = commands.add_parser("plan", help="detect this machine and print the build plan with its reasons; builds nothing")
    _add_params_options(plan)

    commands.add_parser("detect", help="print what this machine has (JSON)")
    commands.add_parser("backends", help="every backend: where it has run, its profile, settings, tables and failures")

    diagnose = commands.add_parser(
        "diagnose", help="name the known failures in a build log, traceback, runtime output or pasted issue body",
        description="Name the known failures in a build log, traceback, runtime output or pasted issue body.",
        epilog=f"exit status: {int(ExitCode.FOUND)} a known failure was named; {int(ExitCode.UNRECOGNISED)} the text "
               f"plainly failed and no known failure matches (unrecognised-failure); {int(ExitCode.OK)} no failure "
               f"found; {int(ExitCode.NOT_A_LOG)} the file is binary, not a log; {int(ExitCode.BAD_INPUT)} it cannot "
               "be read, or it is empty")
    diagnose.add_argument("path", type=Path, help="a build log, traceback, runtime output or pasted issue body "
                                                  "(Markdown quotes and fences are read through)")
    diagnose.add_argument("--json", action="store_true", help="print a JSON list of findings")

    bundle = commands.add_parser("bundle", help="write the wheels and trimmed source a machine without network needs")
    bundle.add_argument("dest", type=Path, help="folder that receives wheels/, source/, BUNDLE.json and README.txt")
    bundle.add_argument("--python", dest="python_version", default="3.12", metavar="X.Y",
                        help="the target's Python version (default: 3.12)")
    bundle.add_argument("--platform", dest="platforms", action="append", default=None, metavar="TAG",
                        help="a wheel platform tag the target accepts (repeatable; default: manylinux x86_64 tags)")
    bundle.add_argument("--exclude-present", type=Path, default=None, metavar="FILE",
                        help="distributions already installed there, one a line, e.g. params/present/gpu-machine.txt")
    bundle.add_argument("--sdist", type=Path, default=None, metavar="PATH",
                        help="llama-cpp-python sdist or unpacked tree (default: the pinned sdist, downloaded if needed)")
    bundle.add_argument("--requirement", dest="requirements", action="append", default=None, metavar="SPEC",
                        help="bundle these instead of the headless requirements (repeatable)")
    bundle.add_argument("--max-size", type=float, default=None, metavar="MIB",
                        help="refuse a bundle larger than this (e.g. what a transfer to the target allows)")

    check = commands.add_parser("check", help=f"re-hash a run folder against {MANIFEST} and {ATTESTATION}")
    check.add_argument("run_dir", metavar="RUN_DIR|s3://BUCKET/PREFIX/RUN")
    check.add_argument("--allow-missing", action="append", default=[], metavar="GLOB",
                       help="files that may be absent, e.g. 'wheelhouse/*' (repeatable)")

    attest = commands.add_parser("attest", help=f"write {ATTESTATION} for a run written before attestation existed")
    attest.add_argument("run_dir", type=Path)
    attest.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                        help="absent files left out of the archive on purpose, e.g. 'wheelhouse/*' (repeatable)")
    attest.add_argument("--note", default="written after the run by `playbook attest` from the archived files",
                        help="why the attestation is retroactive (recorded in it)")

    report = commands.add_parser("report", help=f"write {REPORT_INDEX} and the executed notebooks as HTML")
    report.add_argument("run_dir", type=Path)
    report.add_argument("--output", default="", metavar="URL",
                        help="folder or URL papermill can write to, e.g. s3://bucket/run (default: RUN_DIR/report)")

    compare = commands.add_parser("compare", help="a table and plot across run folders (globs allowed)")
    compare.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                         help="run folders, globs ('outputs/*') or s3:// URLs ('s3://bucket/prefix/*')")
    compare.add_argument("--output", type=Path, default=None,
                         help="folder for compare.csv, compare.png and the executed compare.ipynb "
                              "(default: compare/ in the outputs folder)")
    compare.add_argument("--overlay", action="store_true",
                         help="also overlay.png/.svg/.csv: the runs' sweeps in one figure (tokens/s by offloaded "
                              "layers, pp and tg, with the bandwidth limit), e.g. a CUDA and a Vulkan build on one GPU")

    publish = commands.add_parser("publish", help="put a run's verified wheel and its record into a PEP 503 index")
    publish.add_argument("run_dir", type=Path, metavar="RUN")
    publish.add_argument("--to", dest="destination", required=True, metavar="FOLDER|http(s)://URL|s3://BUCKET/PREFIX",
                         help="the index: a folder, a server that accepts PUT, or s3://bucket/prefix")

    install = commands.add_parser("install", help="install a verified wheel that fits this machine from the indexes; "
                                                  "build one when none fits or its check fails")
    _add_params_options(install)
    install.add_argument("--from", dest="sources", action="append", default=[], metavar="INDEX",
                         help="a team index (folder, http(s):// or s3://; repeatable), after the local wheel cache "
                              "and the parameters' wheel_index.sources; a plain PEP 503 index such as upstream's "
                              ".../whl/cu124 too, or the word upstream: upstream's folders for this machine")
    install.add_argument("--into", type=Path, default=None, metavar="VENV",
                         help="the environment to install into (default: the one running the playbook)")
    install.add_argument("--publish", default="", metavar="INDEX", help="publish what a fallback build made there")
    install.add_argument("--no-build", action="store_true", help="fail instead of building when nothing fits")
    install.add_argument("--project", type=Path, default=None, metavar="DIR",
                         help="write pyproject-llama-cpp.toml and requirements-llama-cpp.txt there: the lines that "
                              "get this wheel in the project's own uv sync / pip install")

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if getattr(args, "verbose", False) else logging.WARNING,
                        format="%(message)s", stream=sys.stderr)
    try:
        return int(COMMANDS[args.command](args))
    except PlaybookError as error:
        print(f"playbook: {error}", file=sys.stderr)
        return int(error.exit_code)
    except KeyboardInterrupt:
        print("playbook: interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)


def _add_params_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", type=Path, default=None, help="parameter file (default: params/default.yaml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override one parameter, e.g. --set model.shape=1b (repeatable)")


def _add_chain_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--force", action="store_true",
                        help="build even when the plan says the build must fail (its blockers)")
    parser.add_argument("--verbose", action="store_true", help="show every notebook cell's output as it runs")


def _run(args: argparse.Namespace) -> int:
    from playbook.chain import run_chain
    from playbook.interfaces.terminal import ConsoleReporter
    from playbook.params import load_params
    from playbook.resources import default_output_root, resolve_params_file
    from playbook.runfolder.folder import check_writable, run_folders
    from playbook.runfolder.remote import check_remote, is_remote, upload_run
    from playbook.steps.source import resolve_params_source

    params_file = resolve_params_file(args.params) if args.params else None
    params = load_params(params_file, args.overrides)
    output = args.output or str(default_output_root())
    check_remote(output)
    resolve_params_source(params)  # a version that does not exist is refused before a run folder exists
    source = str(args.params or "params/default.yaml") + "".join(f" --set {o}" for o in args.overrides)
    reporter = ConsoleReporter(progress=not args.verbose)
    if not is_remote(output):
        check_writable(Path(output))
        return _exit_status(run_chain(params, source, Path(output), force=args.force, verbose=args.verbose,
                                      on_event=reporter))
    import tempfile

    reporter.uploaded_to = output
    with tempfile.TemporaryDirectory(prefix="playbook-run-") as local:
        try:
            run = run_chain(params, source, Path(local), force=args.force, verbose=args.verbose, on_event=reporter)
        finally:  # a failed or refused run is uploaded too: it is the record of what happened
            for folder in run_folders(Path(local)):
                print(f"uploaded {folder.name} to {upload_run(folder, output)}")
        return _exit_status(run)


def _resume(args: argparse.Namespace) -> int:
    from playbook.chain import resume
    from playbook.interfaces.terminal import ConsoleReporter

    run = resume(args.run_dir, force=args.force, verbose=args.verbose, on_event=ConsoleReporter(progress=not args.verbose))
    return _exit_status(run)


def _exit_status(run) -> int:  # type: ignore[no-untyped-def]
    from playbook.runfolder.folder import Outcome

    return int(ExitCode.OK if run.record().outcome is Outcome.OK else ExitCode.RUN_FAILED)


def _plan(args: argparse.Namespace) -> int:
    from playbook.interfaces.tables import plan_summary
    from playbook.params import load_params
    from playbook.resources import resolve_params_file
    from playbook.steps.configure import configure_here
    from playbook.steps.detect import detect_for

    params = load_params(resolve_params_file(args.params) if args.params else None, args.overrides)
    plan = configure_here(detect_for(params), params)
    print(plan_summary(plan))
    print()
    for decision in plan.decisions:
        print(f"- {decision.what}: {decision.value}\n    because {decision.reason}")
    for shell, lines in plan.shell_commands.items():
        print(f"\nto build by hand, {shell}:")
        print("\n".join(f"  {line}" for line in lines))
    for blocker in plan.blockers:
        print(f"\nREFUSED: {blocker}")
    return int(ExitCode.REFUSED if plan.blockers else ExitCode.OK)


def _backends(args: argparse.Namespace) -> int:
    from playbook.interfaces.tables import backends_table

    print(backends_table().to_string(index=False))
    return 0


def _detect(args: argparse.Namespace) -> int:
    import dataclasses

    from playbook.params import Params
    from playbook.steps.detect import detect

    print(json.dumps(dataclasses.asdict(detect(cache_dir=Params().cache_dir)), indent=2))
    return 0


def _diagnose(args: argparse.Namespace) -> int:
    from playbook.knowledge.failures import UNRECOGNISED, diagnose_log
    from playbook.knowledge.logtext import read_log

    log = read_log(args.path)
    if not log.data or log.data.isspace():  # "no failure found" would say it was read and found healthy
        raise PlaybookError(f"{args.path} is empty" + (" (blank lines only)" if log.data else "")
                            + ": nothing to diagnose; give the file the log was saved to")
    findings = diagnose_log(log, detect_failure=True)
    named = any(f.id != UNRECOGNISED for f in findings)
    status = ExitCode.FOUND if named else ExitCode.UNRECOGNISED if findings else ExitCode.OK
    if args.json:
        print(json.dumps([f.to_dict() for f in findings], indent=2))
        return int(status)
    if not findings:
        print(f"no failure found in {args.path}")
    for finding in findings:
        print("\n".join(finding_lines(finding)) + "\n")
    return int(status)


def finding_lines(finding) -> list[str]:  # type: ignore[no-untyped-def]
    """How ``playbook diagnose`` shows one finding: id and title, how sure (when named by resemblance),
    the line, the fix."""
    from playbook.knowledge.failures import UNRECOGNISED

    lines = [f"[{finding.id}] {finding.title}" + (f" ({finding.stage})" if finding.stage else "")]
    if finding.similarity and finding.id != UNRECOGNISED:
        lines.append(f"  likely {finding.id} ({finding.similarity:.2f}, like {finding.like}): no pattern names it; "
                     "its error lines resemble that example's")
    elif finding.likely:
        lines.append(f"  hint, not a diagnosis: the nearest known failure is {finding.likely} "
                     f"({finding.similarity:.2f}, like {finding.like}), too unsure to name it; its fix is not given "
                     "and no remedy is applied")
    lines.append(f"  line {finding.line_number}: {finding.evidence}")
    lines.append(f"  fix{' (automatic in playbook run)' if finding.automatic else ''}: {finding.fix}")
    return lines


def _bundle(args: argparse.Namespace) -> int:
    from playbook.offline.bundle import DEFAULT_PLATFORMS, make_bundle
    from playbook.params import load_params
    from playbook.steps.source import resolve_params_source

    sdist = args.sdist
    if sdist is None:
        sdist = Path(resolve_params_source(load_params(None)).path)
    made = make_bundle(args.dest, sdist, args.python_version, args.platforms or DEFAULT_PLATFORMS,
                       args.requirements, args.exclude_present,
                       max_bytes=int(args.max_size * 2**20) if args.max_size else None,
                       log=lambda line: print(line, file=sys.stderr))
    print(made.summary())
    print("on the target, in the playbook's checkout (the first line says where the bundle is there):")
    print("\n".join(f"  {line}" for line in made.command.splitlines()))
    return 0


def _check(args: argparse.Namespace) -> int:
    from playbook.runfolder.integrity import check_run
    from playbook.runfolder.remote import check_remote, download_run, is_remote

    check_remote(args.run_dir)
    if not is_remote(args.run_dir):
        result = check_run(Path(args.run_dir), args.allow_missing)
    else:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="playbook-check-") as local:
            result = check_run(download_run(args.run_dir, Path(local) / "run"), args.allow_missing)
        result.run_dir = args.run_dir
    print("\n".join(result.lines()))
    return 0 if result.ok else 1


def _attest(args: argparse.Namespace) -> int:
    from playbook.runfolder.attestation import write_attestation
    from playbook.runfolder.folder import RunFolder
    from playbook.runfolder.integrity import amend_manifest

    path = write_attestation(RunFolder(args.run_dir), retroactive=args.note)
    try:
        amend_manifest(args.run_dir, args.exclude, f"added {path.name} (retroactive attestation)"
                       + (f"; marked absent {', '.join(args.exclude)} as not archived" if args.exclude else ""))
    except ValueError as error:
        path.unlink()
        print(f"playbook: {error}", file=sys.stderr)
        return 1
    print(f"wrote {path}; {RunFolder(args.run_dir).layout.manifest} amended")
    return 0


def _report(args: argparse.Namespace) -> int:
    from playbook.interfaces.report import write_report

    print(f"wrote {write_report(args.run_dir, args.output)}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from playbook.interfaces.fleet import expand_run_dirs, run_compare_notebook, write_overlay
    from playbook.resources import default_output_root

    output = args.output or default_output_root() / "compare"
    run_dirs = expand_run_dirs(args.run_dirs, downloads=output / "runs")
    for path in run_compare_notebook(run_dirs, output):
        print(f"wrote {path}")
    for path in write_overlay(run_dirs, output) if args.overlay else []:
        print(f"wrote {path}")
    return 0


def _publish(args: argparse.Namespace) -> int:
    from playbook.wheelindex.index import open_store, publish
    from playbook.wheelindex.metadata import record_from_run, vocabulary_of_run

    record, wheel = record_from_run(args.run_dir)
    url = publish(open_store(args.destination), record, wheel, vocabulary_of_run(args.run_dir))
    print(f"published {wheel.name} ({record.describe()})\n  index: {url}")
    return 0


def _install(args: argparse.Namespace) -> int:
    from playbook.params import load_params
    from playbook.resources import resolve_params_file
    from playbook.steps.detect import detect_for
    from playbook.wheelindex.install import InstallRequest, install
    from playbook.wheelindex.project_lines import for_published

    params = load_params(resolve_params_file(args.params) if args.params else None, args.overrides)
    done = install(InstallRequest(detect_for(params), params, args.sources, args.into, not args.no_build,
                                  args.publish), log=lambda line: print(line, file=sys.stderr))
    assert done.chosen is not None
    print(f"installed {done.chosen.wheel} ({done.chosen.describe()}) into {done.installed_into} "
          f"in {done.duration_s:.1f} s")
    lines = for_published(done.chosen, done.index_url)
    print(lines.text())
    if args.project:
        args.project.mkdir(parents=True, exist_ok=True)
        (args.project / "pyproject-llama-cpp.toml").write_text(lines.pyproject, encoding="utf-8")
        (args.project / "requirements-llama-cpp.txt").write_text(lines.requirements, encoding="utf-8")
        print(f"wrote {args.project / 'pyproject-llama-cpp.toml'} and {args.project / 'requirements-llama-cpp.txt'}")
    return 0


COMMANDS = {"publish": _publish, "install": _install, "run": _run, "resume": _resume, "plan": _plan, "detect": _detect,
            "backends": _backends, "diagnose": _diagnose, "bundle": _bundle,
            "check": _check, "attest": _attest, "report": _report, "compare": _compare}

if __name__ == "__main__":
    sys.exit(main())
