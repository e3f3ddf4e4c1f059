"""`dsdsim calibrate --report` says when a fit is not a measurement: an efficiency above 1 (faster than the spec's
peak) is written as 1, an implausible overhead is kept, both marked `verified: unverified` with the reason and
warned about on stderr (one line each); a partial report is warned about and named in the figures' source."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from dsdsim.cli import main
from dsdsim.fit.calibrate import (IMPLAUSIBLE, MAX_EFFICIENCY, MAX_LAUNCH_OVERHEAD_S, MAX_STEP_OVERHEAD_S,
                                  flag_implausible, implausible_figures)
from dsdsim.specs.catalog import load_hardware

ROOT = Path(__file__).resolve().parents[1]
CPU = ROOT / "results" / "cpu"
SOURCE = "dsdsim calibrate test"


def test_plausible_figures_stay_measured():
    spec = load_hardware("h100-sxm").with_efficiency(source=SOURCE, compute=0.7, memory=0.9, step_overhead_s=2e-4,
                                                     launch_overhead_s=3e-6)
    assert flag_implausible(spec, SOURCE) == spec
    assert implausible_figures(spec) == []


def test_efficiency_above_one_is_clamped_and_overheads_flagged():
    spec = load_hardware("h100-sxm").with_efficiency(source=SOURCE, compute=1.2, memory=0.9, step_overhead_s=0.038,
                                                     launch_overhead_s=3e-4)
    out = flag_implausible(spec, SOURCE)
    assert out.efficiency.compute.value == MAX_EFFICIENCY
    assert out.efficiency.compute.verified.value == "unverified" and IMPLAUSIBLE in out.efficiency.compute.note
    assert out.efficiency.memory.verified.value == "measured"          # 0.9: plausible, untouched
    assert out.step_overhead_s.value == 0.038 and out.step_overhead_s.verified.value == "unverified"
    assert f"{MAX_STEP_OVERHEAD_S * 1e3:g} ms" in out.step_overhead_s.note
    assert out.launch_overhead_s.verified.value == "unverified"
    assert f"{MAX_LAUNCH_OVERHEAD_S * 1e3:g} ms" in out.launch_overhead_s.note
    names = [line.split(":")[0] for line in implausible_figures(out)]
    assert sorted(names) == ["efficiency.compute", "launch_overhead_s", "step_overhead_s"]


def test_figures_another_source_wrote_are_left_alone():
    """Only what this calibration fitted is judged: a figure from elsewhere keeps its own flag."""
    spec = load_hardware("h100-sxm").with_efficiency(source="someone else", step_overhead_s=0.038)
    assert flag_implausible(spec, SOURCE) == spec


@pytest.mark.slow
def test_calibrate_warns_on_a_partial_report_faster_than_peak(tmp_path, capsys):
    """The committed quick CPU report, its GEMMs made 3x faster than measured (above the probed peak) and marked
    partial: each problem is one warning line, and the spec does not call the clamped figure measured."""
    data = json.loads((CPU / "quick" / "report.json").read_text())
    data["points"] = data["points"][::2]
    for p in data["points"]:
        if p["kind"] == "gemm":
            p["measured_s"] /= 3.0
    data.update(partial=True, stage="passes")
    report = tmp_path / "run" / "report.json"
    report.parent.mkdir()
    report.write_text(json.dumps(data))
    out = tmp_path / "cal.yaml"
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "-r", str(report), "-g", str(CPU / "probe-cpu.yaml"), "-o", str(out)])
        raise SystemExit(0)
    assert exc.value.code in (0, None)
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert any("is partial" in w and "passes" in w for w in warnings), warnings
    assert any(w.startswith("warning: efficiency.compute: implausible fit") for w in warnings), warnings
    written = yaml.safe_load(out.read_text())
    compute = written["efficiency"]["compute"]
    assert compute["value"] <= MAX_EFFICIENCY and compute["verified"] == "unverified"
    assert "partial" in compute["source"]
    assert load_hardware(out).efficiency.compute.value <= 1.0
