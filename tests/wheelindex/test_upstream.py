"""Plain PEP 503 indexes laid out as llama-cpp-python's own (``whl/<folder>/llama-cpp-python/``), served by a real
HTTP server on localhost with real wheels (small packages pip builds here): listed with what the folder and the
wheel's name say, ranked below recorded wheels, refused where the known part does not fit, a tampered download
refused, an unreachable upstream skipped in one line."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from test_wheelindex import (
    RTX_3090,
    index_server,  # noqa: F401  (a fixture)
    machine_with,
    needs,
    record_of,
    small_wheel,
)

from playbook.errors import ParameterError
from playbook.files import sha256_of
from playbook.localhost import free_port
from playbook.params import load_params
from playbook.wheelindex import index as wheel_index
from playbook.wheelindex import upstream
from playbook.wheelindex.install import gather, search
from playbook.wheelindex.select import choose, needs_from_facts


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("wheels")
    return {marker: small_wheel(folder, marker) for marker in ("recorded", "upstream")}


def upstream_folder(root: Path, folder: str, wheels: list[Path], *, absolute: str = "",
                    digests: dict[str, str] | None = None, names: tuple[str, ...] = ()) -> None:
    """``root/whl/<folder>`` as upstream's releases-to-pep-503.sh writes it, each wheel's link carrying its
    ``#sha256=`` (``digests`` overrides one); ``absolute``: the wheels lie under that URL's
    ``releases/download/<folder>/`` instead, linked absolutely (as upstream links GitHub's release assets);
    ``names``: links to wheels that are not there (other Pythons and platforms)."""
    index = root / "whl" / folder
    (index / "llama-cpp-python").mkdir(parents=True)
    (index / "index.html").write_text('<!DOCTYPE html>\n<html>\n  <head></head>\n  <body>\n    <a href="llama-cpp-'
                                      'python/">llama-cpp-python</a>\n    <br>\n  </body>\n</html>\n')
    links = []
    for wheel in wheels:
        where = root / "releases" / "download" / folder if absolute else index / "llama-cpp-python"
        where.mkdir(parents=True, exist_ok=True)
        shutil.copy2(wheel, where / wheel.name)
        href = f"{absolute}/releases/download/{folder}/{wheel.name}" if absolute else wheel.name
        digest = (digests or {}).get(wheel.name, sha256_of(wheel))
        links.append(f'    <a href="{href}#sha256={digest}">{wheel.name}</a>\n    <br>\n')
    links += [f'    <a href="{name}">{name}</a>\n    <br>\n' for name in names]
    (index / "llama-cpp-python" / "index.html").write_text(
        "<!DOCTYPE html>\n<html>\n  <body>\n    <h1>Links for llama-cpp-python</h1>\n    <h2>v0.3.36</h2>\n"
        + "".join(links) + "  </body>\n</html>\n")


def search_params(tmp_path: Path, *overrides: str):  # type: ignore[no-untyped-def]
    return load_params(None, [f"build.cache_dir={tmp_path / 'cache'}", "wheel_index.local=false", *overrides])


def test_an_upstream_folder_is_listed_and_ranked_below_a_recorded_wheel(tmp_path, this_machine, wheels,
                                                                      index_server):  # noqa: F811
    root, url = index_server
    wheel_index.publish(wheel_index.FolderStore(root / "team"), record_of(wheels["recorded"], "cpu"),
                        wheels["recorded"])
    upstream_folder(root, "cpu", [wheels["upstream"]])
    lines: list[str] = []
    candidates, skipped = gather([f"{url}/team", f"{url}/whl/cpu"], lines.append)
    assert skipped == [] and len(candidates) == 2
    plain = candidates[1]
    assert plain.url == f"{url}/whl/cpu/llama-cpp-python/{wheels['upstream'].name}"
    record = plain.record
    assert (record.backend, record.version, record.python_tag, record.platform_tag) == ("cpu", "0.3.36", "py3", "any")
    assert record.sha256 == sha256_of(wheels["upstream"]) and record.unknown == ["CPU features"]
    assert "not recorded: CPU features" in record.describe()
    selection = choose(candidates, needs(this_machine, gpus=[], driver_cuda=""))
    assert [c.url for c in selection.ranked] == ["", plain.url]  # the recorded wheel first
    said = {v.variant: v.reason for v in selection.verdicts}
    assert said[wheels["upstream"].name].startswith(
        "fits, ranked 2: cpu wheel of a plain index, ranked below recorded cpu wheels (not known until the check "
        "here: CPU features); runs on the CPU; the CPU instructions it needs are not recorded")


def test_what_is_known_of_an_upstream_wheel_refuses_it(tmp_path, this_machine, wheels, index_server):  # noqa: F811
    """A cu125 wheel for a driver of CUDA 12.4, another backend than asked, another Python or platform, a newer
    glibc: refused with the reason; a cu124 wheel fits, its GPU architectures left to the check."""
    root, url = index_server
    upstream_folder(root, "cu125", [wheels["upstream"]], absolute=url)
    upstream_folder(root, "cu124", [wheels["recorded"]], absolute=url,
                    names=("llama_cpp_python-0.3.36-cp39-cp39-win_amd64.whl",
                           "llama_cpp_python-0.3.36-cp312-cp312-manylinux_2_39_x86_64.whl"))
    candidates, _ = gather([f"{url}/whl/cu125", f"{url}/whl/cu124"], print)
    assert [c.record.requirements.get("release") for c in candidates] == ["12.5", "12.4", "12.4", "12.4"]
    assert candidates[0].url == f"{url}/releases/download/cu125/{wheels['upstream'].name}"
    assert candidates[1].record.unknown == ["CPU features", "GPU architectures (sm_XX, PTX)"]
    assert candidates[3].record.glibc == "2.39"
    facts = machine_with(this_machine, [RTX_3090], "12.4")
    tags = ["py3-none-any", "cp312-cp312-manylinux_2_39_x86_64"]
    selection = choose(candidates, needs_from_facts(facts, tags, "auto", "0.3.36"))
    said = {(v.source.rsplit("/", 1)[-1], v.wheel.split("-", 2)[2]): v for v in selection.verdicts}
    assert not said["cu125", "py3-none-any.whl"].accepted
    assert "CUDA 12.5 is newer than the driver supports (CUDA 12.4)" in said["cu125", "py3-none-any.whl"].reason
    assert "cp39-cp39-win_amd64 is not a tag the target Python accepts" in said["cu124", "cp39-cp39-win_amd64.whl"].reason
    assert said["cu124", "cp312-cp312-manylinux_2_39_x86_64.whl"].reason == (
        "built against glibc 2.39; this machine has 2.36")
    fits = said["cu124", "py3-none-any.whl"]
    assert fits.accepted and "CUDA 12.4 runs with this driver (CUDA 12.4); its GPU architectures (sm_XX, PTX) are " \
                             "not recorded: the check here decides" in fits.reason
    only_cpu = choose(candidates, needs_from_facts(facts, tags, "cpu", "0.3.36"))
    assert only_cpu.ranked == []
    assert "a cuda wheel: backend is set to cpu" in only_cpu.verdicts[1].reason


def test_a_tampered_upstream_wheel_is_refused_and_the_next_index_s_taken(tmp_path, this_machine, wheels,
                                                                        index_server):  # noqa: F811
    root, url = index_server
    upstream_folder(root / "tampered", "cpu", [wheels["upstream"]])
    upstream_folder(root / "mirror", "cpu", [wheels["upstream"]])
    served = root / "tampered" / "whl" / "cpu" / "llama-cpp-python" / wheels["upstream"].name
    served.write_bytes(served.read_bytes() + b"\0")
    lines: list[str] = []
    sources = [f"{url}/tampered/whl/cpu", f"{url}/mirror/whl/cpu"]
    found = search(this_machine, search_params(tmp_path), sources,
                   needs(this_machine, gpus=[], driver_cuda=""), lines.append, check=False)
    assert found.found is not None and found.found.candidate.source == sources[1]
    assert found.found.index_url == sources[1]  # what a project's lines name: the plain index itself
    assert sha256_of(found.found.wheel) == sha256_of(wheels["upstream"])
    refused = [v for v in found.verdicts if v.source == sources[0] and not v.accepted]
    assert len(refused) == 1 and refused[0].reason.startswith(f"refused and skipped: {url}/tampered/whl/cpu/llama-cpp-"
                                                               f"python/{wheels['upstream'].name}: sha256 ")
    assert found.verdicts[-1].reason == "taken: not checked (check off)"
    downloads = tmp_path / "cache" / "downloads" / "wheels" / sha256_of(wheels["upstream"])[:16]
    assert [p.name for p in downloads.iterdir()] == [wheels["upstream"].name]  # the good one only, no partial file


def test_an_unreachable_upstream_is_skipped_in_one_line_per_folder(tmp_path, this_machine):
    dead = f"http://127.0.0.1:{free_port()}/whl"
    params = search_params(tmp_path, f"wheel_index.upstream_url={dead}")
    lines: list[str] = []
    found = search(this_machine, params, ["upstream"], needs(this_machine, driver_cuda="12.8"), lines.append,
                   check=False)
    assert found.sources == [f"{dead}/cu125", f"{dead}/cpu"]  # CUDA first: the newest upstream release <= 12.8
    assert lines == [f"index {dead}/{folder} skipped: {dead}/{folder} did not answer: [Errno 111] Connection refused"
                     for folder in ("cu125", "cpu")]
    assert found.found is None and found.why_none() == "no published wheel in the indexes (0 of 2 indexes answered)"


def test_upstream_names_the_folders_for_this_machine(this_machine):
    base = upstream.UPSTREAM_URL
    assert upstream.expand(["/team", "upstream"], needs(this_machine, driver_cuda="13.1"), base) == [
        "/team", f"{base}/cu130", f"{base}/cpu"]
    assert upstream.expand(["upstream"], needs(this_machine, driver_cuda="12.4")) == [f"{base}/cu124", f"{base}/cpu"]
    assert upstream.expand(["upstream"], needs(this_machine, driver_cuda="11.7")) == [f"{base}/cpu"]
    assert upstream.expand(["upstream"], needs(this_machine, gpus=[], driver_cuda="")) == [f"{base}/cpu"]
    assert [upstream.backend_of(f)[0] if upstream.backend_of(f) else None
            for f in ("cpu", "cu118", "cu132", "rocm72", "hip-radeon", "vulkan", "metal", "simple")] == [
        "cpu", "cuda", "cuda", "hip", "hip", "vulkan", "metal", None]
    assert [upstream.glibc_of(tag) for tag in ("manylinux_2_31_x86_64", "manylinux2014_x86_64.manylinux_2_17_x86_64",
                                               "linux_x86_64", "macosx_11_0_arm64", "win_amd64")] == [
        ("2.31", True), ("2.17", True), ("", False), ("", True), ("", True)]
    assert load_params(None, ["wheel_index.sources=[upstream]"]).wheel_index.sources == ["upstream"]
    with pytest.raises(ParameterError, match="is not a folder; give a folder, http.*or upstream"):
        load_params(None, ["wheel_index.sources=[upstreams]"])
    with pytest.raises(ParameterError, match="wheel_index.upstream_url = 'upstream' is not a folder"):
        load_params(None, ["wheel_index.upstream_url=upstream"])


def test_a_plain_index_whose_folder_names_no_backend_is_skipped_saying_so(tmp_path, wheels,
                                                                          index_server):  # noqa: F811
    root, url = index_server
    upstream_folder(root, "simple", [wheels["upstream"]])
    lines: list[str] = []
    candidates, skipped = gather([f"{url}/whl/simple"], lines.append)
    assert candidates == [] and len(lines) == 1 and skipped == lines
    assert "whose folder 'simple' names no backend as upstream's folders do (" in lines[0]
    assert all(folder in lines[0] for folder in ("cpu,", "rocm72", "hip-radeon", "vulkan", "metal", "cuXYZ"))


@pytest.mark.network
@pytest.mark.skipif(os.environ.get("PLAYBOOK_NETWORK_TESTS") != "1",
                    reason="reads llama-cpp-python's own index; set PLAYBOOK_NETWORK_TESTS=1")
def test_the_real_upstream_cpu_index_is_listed():
    """Read-only: upstream's project page, its links to the GitHub release assets, the backend from the folder.
    Upstream is read "where it can be reached" (issue 32): a machine whose network reaches a package index but not
    upstream's host (this project's CI VM resolves no github.io name) skips it, saying so."""
    source = f"{upstream.UPSTREAM_URL}/cpu"
    try:
        found = upstream.candidates(wheel_index.open_store(source), source)
    except wheel_index.Unreachable as error:
        pytest.skip(f"upstream's index cannot be reached from here: {error}")
    assert len(found) > 10
    assert all(c.record.backend == "cpu" and "CPU features" in c.record.unknown for c in found)
    assert all(c.url.startswith("https://github.com/abetlen/llama-cpp-python/releases/download/") for c in found)
    assert any(c.record.platform_tag.endswith("x86_64") for c in found)


def test_a_link_without_a_sha256_is_downloaded_and_its_digest_recorded(tmp_path, this_machine, wheels,
                                                                       index_server):  # noqa: F811
    """As upstream's links are: the download is checked against nothing, and says so; its record gets the digest."""
    root, url = index_server
    upstream_folder(root, "cpu", [], names=(f"../../../releases/{wheels['upstream'].name}",))
    (root / "releases").mkdir()
    shutil.copy2(wheels["upstream"], root / "releases" / wheels["upstream"].name)
    lines: list[str] = []
    found = search(this_machine, search_params(tmp_path), [f"{url}/whl/cpu"], needs(this_machine, gpus=[],
                   driver_cuda=""), lines.append, check=False)
    assert found.found is not None
    assert found.found.candidate.url == f"{url}/releases/{wheels['upstream'].name}"
    assert found.found.candidate.record.sha256 == sha256_of(wheels["upstream"])
    assert any("its index gives no sha256" in line and "only the check vouches for it" in line for line in lines)


@pytest.mark.long
def test_install_from_an_upstream_folder_joins_the_local_index_with_its_unknowns(tmp_path, this_machine, wheels,
                                                                               index_server):  # noqa: F811
    from test_wheelindex import fresh_venv, install_request, installed_build

    from playbook.wheelindex.install import install

    root, url = index_server
    upstream_folder(root, "cpu", [wheels["upstream"]])
    venv = fresh_venv(tmp_path / "venv")
    done = install(install_request(tmp_path, this_machine, [f"{url}/whl/cpu"], venv), log=print)
    assert done.chosen is not None and done.chosen_from == f"{url}/whl/cpu" and done.index_url == f"{url}/whl/cpu"
    assert installed_build(venv) == "upstream"
    [kept] = wheel_index.read_catalogue(wheel_index.open_store(tmp_path / "second-cache" / "wheel-index")).records
    assert kept.sha256 == sha256_of(wheels["upstream"]) and kept.unknown == ["CPU features"]
