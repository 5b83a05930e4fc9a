"""``psoup bench linear-road --xways N --speedup K``: the L-rating on generated input.

1. Generates N expressways of Linear Road input and their toll history
   (``psoup linear-road generate``; 3 simulated hours unless ``--duration``).
2. Starts ``psoup serve --linear-road`` as a child process (its own CPU and GIL), hydrates
   the history through the PySpark pipeline and runs the data driver at speed-up K.
3. Checks every answer with the independent checker (``psoup linear-road check``).
4. Reports whether all answers were right and on time, per answer type the max and p99
   response times, the server's CPU time per position report and its peak memory, and
   (``--profile``) where a report's server time goes, measured by replaying the first 20
   simulated minutes in-process (psoup/bench/lr_profile.py).

L = N x K passes when every answer is right and on time at full duration (spec 3.3).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

from clients import PSoupClient
from psoup.bench import lr_profile, machine, report
from psoup.bench.flame import Flame
from psoup.child import in_child
from psoup.linear_road import check, driver, generate
from psoup.pinning import cpu_list, process_on
from psoup.procinfo import cpu_seconds
from psoup.server.process import ServerProcess

PLOT = "linear_road_scale.png"
PROFILE_SECONDS = 1200  # simulated seconds replayed in-process for --profile


def _shard_killer(target: str, after: float) -> threading.Timer:
    """SIGKILL the server's last shard ``after`` wall seconds from now."""

    def kill() -> None:
        with PSoupClient(target) as c:
            pid = c.stats()["shards"][-1]["pid"]
        os.kill(pid, signal.SIGKILL)
        print(f"killed shard process {pid}")

    timer = threading.Timer(after, kill)
    timer.daemon = True
    timer.start()
    return timer


def _restarts(target: str) -> list[int]:
    with PSoupClient(target) as c:
        return [s["restarts"] for s in c.stats()["shards"]]


def _shards_cpu(target: str) -> dict[int, float]:
    """pid -> CPU seconds so far of each shard's process (Ray actors on this machine)."""
    with PSoupClient(target) as c:
        return {s["pid"]: cpu_seconds(s["pid"]) for s in c.stats()["shards"]}


def run(
    out: Path,
    xways: int,
    speedup: float,
    duration: int = generate.RUSH_HOUR,
    seed: int = 7,
    work: Path | None = None,
    profile: bool = False,
    stress: bool = False,
    sync: str | None = None,
    shards: int | None = None,
    kill_shard: int | None = None,
    server_cpus: frozenset[int] | None = None,
    driver_cpus: frozenset[int] | None = None,
) -> int:
    """Generate, hydrate, drive, check; print the result and write BENCHMARKS.md's
    linear-road-scale section (``-stress`` with ``stress``: a busy loop on another core
    through the replay; ``-durable`` with ``sync``: the server keeps a data directory
    with that sync mode; ``-shardsN`` with ``shards``: ``psoup serve --shards N`` on
    Ray; ``kill_shard``: its last shard SIGKILLed at about that simulated second) and its
    plot. Returns 0 when every answer is right and on time,
    else 1."""
    suffix = (("-stress" if stress else "") + ("-durable" if sync else "")
              + (f"-shards{shards}" if shards else ""))  # fmt: skip
    suffix += "-killed" if kill_shard is not None else ""
    suffix += "-placed" if server_cpus or driver_cpus else ""
    section = "linear-road-scale" + suffix
    plot_name = PLOT if not suffix else f"linear_road_scale{suffix.replace('-', '_')}.png"
    with tempfile.TemporaryDirectory(prefix="psoup-lr-bench-") as tmp:
        root = Path(work) if work else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        input_path, history_path = root / "input.dat", root / "history.dat"
        answers = root / "answers"
        start = time.perf_counter()
        # In a child process: the generator's memory is not the driver's.
        gen = in_child(
            generate.generate, input_path, xways=xways, duration=duration, seed=seed,
            history=history_path,
        )  # fmt: skip
        gen_s = time.perf_counter() - start
        print("\n".join(gen.lines()))
        keep = ("--sync", sync) if sync else ()
        if shards:
            keep += ("--shards", str(shards))
        if server_cpus:
            keep += ("--cpus", cpu_list(server_cpus))
            keep += ("--shard-cpus", cpu_list(server_cpus)) if shards else ()
        data_dir = root / "data" if sync else None
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)  # a fresh server, as without --sync
        with ServerProcess(*driver.server_args(), *keep, data_dir=data_dir) as srv:
            start = time.perf_counter()
            driver.hydrate_history(history_path, srv.target, root)
            hydrate_s = time.perf_counter() - start
            spark_peak = driver.children_peak_rss("spark (hydration)")
            if settled := driver.settle("the bench"):
                print(settled)
            cpu0 = srv.cpu_seconds()
            shards_cpu0 = _shards_cpu(srv.target) if shards else {}
            killer = _shard_killer(srv.target, kill_shard / speedup) if kill_shard else None
            flame_svg = out / f"linear_road_flame{suffix.replace('-', '_')}.svg"
            flame = Flame(srv.proc.pid, flame_svg) if profile else None
            with (
                machine.busy_loop() if stress else contextlib.nullcontext(),
                process_on(driver_cpus, "--driver-cpus"),
            ):
                summary = driver.run(
                    input_path, None, answers, speedup, server=srv.target,
                    server_cpu=srv.cpu_seconds,
                )  # fmt: skip
            flame_note = None
            if flame is not None:
                flame_note = (
                    f"py-spy flame graph of the server through the replay: [{flame_svg.name}]"
                    f"({flame_svg.name})"
                    if flame.stop()
                    else f"No flame graph: {flame.problem}."
                )
                print(flame_note)
            restarts = _restarts(srv.target) if shards else []
            if killer is not None:
                killer.cancel()
            cpu = srv.cpu_seconds() - cpu0
            # A shard restarted meanwhile (--kill-shard) is counted until it died only.
            shards_cpu = sum(cpu_seconds(p) - c0 for p, c0 in shards_cpu0.items())
            peak = srv.peak_rss_bytes()
        summary.peak_rss = {**summary.peak_rss, "server": peak, **spark_peak}
        print(summary.table())
        start = time.perf_counter()
        verdict = check.check(input_path, history_path, answers)
        check_s = time.perf_counter() - start
        print(verdict.table())
        if not verdict.ok:
            print(verdict.problems())
        shutil.copyfile(answers / "response_times.png", out / plot_name)
        prof = None
        if profile:
            prof = lr_profile.profile(driver.read_until(input_path, PROFILE_SECONDS))
    ok = verdict.ok and not summary.missed
    rows = []
    for kind, r in summary.rows.items():
        c = verdict.types[kind]
        rows.append(
            [kind, c.expected, r["count"], c.wrong, c.missing, c.extra, c.late, r["max"], r["p99"]]
        )
    headers = ["answer", "expected", "received", "wrong", "missing", "extra", "late", "max s",
               "p99 s"]  # fmt: skip
    lvalue = xways * speedup

    def per_report(seconds: float) -> str:
        return f"{1e6 * seconds / max(gen.reports, 1):.1f}"

    command = (
        f"psoup bench linear-road --xways {xways} --speedup {speedup:g}"
        + (f" --duration {duration}" if duration != generate.RUSH_HOUR else "")
        + (" --stress" if stress else "")
        + (f" --sync {sync}" if sync else "")
        + (f" --shards {shards}" if shards else "")
        + (f" --server-cpus {cpu_list(server_cpus)}" if server_cpus else "")
        + (f" --driver-cpus {cpu_list(driver_cpus)}" if driver_cpus else "")
    )
    facts = [
        f"Machine: {machine.describe()}.",
        "",
        f"**L = {xways} x {speedup:g} = {lvalue:g}: "
        f"{'every answer right and on time' if ok else 'FAILED'}** "
        f"({duration:,} simulated s, {gen.reports:,} position reports, {gen.vehicles:,} "
        f"vehicles, replayed in {summary.seconds:,.0f} wall s).",
        "",
        report.markdown_table(headers, rows),
        "",
        f"Server: {per_report(cpu + shards_cpu)} µs CPU per position report over the replay"
        + (
            f" (front-end {per_report(cpu)}, {shards} shards {per_report(shards_cpu)})"
            if shards
            else ""
        )
        + f"; the driver {per_report(summary.driver_cpu)} (the vehicles' clients, alert"
        " service and answer files, on the same cores)"
        + ". Peak RSS: "
        + ", ".join(f"{k} {v / 2**30:.2f} GB" for k, v in summary.peak_rss.items())
        + f". Generation {gen_s:.0f} s (in a child process), "
        f"hydration of {gen.history_rows:,} history rows {hydrate_s:.0f} s, check "
        f"{check_s:.0f} s. "
        + (f"{settled} " if settled else "")
        + "Response times in simulated seconds (deadlines 5 s; 10 s for daily expenditure)."
        + (" A busy loop ran on the other core through the replay (`--stress`)." if stress else "")
        + (f" The server kept a data directory, `--sync {sync}`." if sync else "")
        + (
            f" The server's threads{' and its shards' if shards else ''} ran on CPU(s) "
            f"{cpu_list(server_cpus)} (`psoup serve --cpus"
            + (" --shard-cpus" if shards else "")
            + "`)."
            if server_cpus
            else ""
        )
        + (
            f" The driver's threads ran on CPU(s) {cpu_list(driver_cpus)} through the replay."
            if driver_cpus
            else ""
        )
        + (
            f" Its last shard was SIGKILLed at about simulated second {kill_shard} and "
            f"restarted by Ray (restarts seen per shard: {restarts}); requests it could not "
            f"answer meanwhile were asked again ({summary.retried} times) and count with "
            "their whole delay."
            if kill_shard
            else ""
        )
        + (
            f" The engine ran as {shards} shards on Ray (`psoup serve --shards {shards}`; "
            "reports spread by expressway, the vehicles' streams by vehicle)."
            if shards
            else ""
        ),
        "",
        "The ten slowest simulated seconds (slowest answer; the server's largest queue and "
        "CPU share while it was answered; the largest share of the machine's CPU time its "
        "host took meanwhile, steal, when every process of a virtual machine is stalled "
        "at once; the largest share of the time the machine's disks were busy meanwhile "
        "and their largest mean ms per write, which every fsync of a durable server waits "
        "behind (~0.1 ms a write when nothing stalls them; a stall of the host's disk "
        "shows as ~100% busy with few writes done); how "
        "late the driver sent that second's batch and how long after it was "
        "acknowledged, in wall ms: balance and daily requests wait for that ack):",
        "",
        report.markdown_table(
            [
                "second",
                "response s",
                "answer",
                "queue",
                "server CPU",
                "machine steal",
                "disk busy, ms per write",
                "sent late ms",
                "acked after ms",
            ],
            [
                [
                    int(w["second"]),
                    int(w["response"]),
                    w["kind"],
                    int(w["queue"]),
                    f"{w['cpu']:.0%}",
                    f"{w['steal']:.0%}",
                    f"{w['disk_busy']:.0%}, {w['disk_ms']:.1f}",
                    round(w["lag_ms"]),
                    round(w["ack_ms"]),
                ]
                for w in summary.slowest
            ],
        ),
        "",
        f"![response times]({plot_name})",
    ]
    if flame_note is not None:
        facts += ["", flame_note + " (the thread holding the GIL, in the server and its"
                  " Ray workers, sampled 49 times a second with native frames, which pauses"
                  " the process briefly at each sample: timings of a profiled run are not a"
                  " rating)."]  # fmt: skip
    if prof is not None:
        comp, n, secs = prof
        facts += [
            "",
            f"Where a report's server time goes (first {PROFILE_SECONDS} simulated s replayed "
            f"in-process, {n:,} reports, psoup/bench/lr_profile.py):",
            "",
            report.markdown_table(
                ["component", "µs per report", "share"], lr_profile.table(comp, n, secs)
            ),
        ]
    md = [f"## Linear Road L-rating (`{command}`)", "", *facts]
    print("\n" + report.table(headers, rows))
    print(f"\nL = {lvalue:g}: {'PASSED' if ok else 'FAILED'}")
    report.write_section(out / "BENCHMARKS.md", section, "\n".join(md))
    return 0 if ok else 1
