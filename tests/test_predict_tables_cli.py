"""`dsdsim predict` tables at the command line: the tolerance table and its summary, where an engine would ignore
or run eager part of a table, one behaviour for a table that never speculates, the context grid's options, and
`-o -` as standard output."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO_ROOT, one_line_error

FAST = ["-b", "1-64"]


def test_tolerance_option_and_its_summary(cli):
    code, out, err = cli("predict", "-m", "llama-3.1-70b", "-g", "h100-sxm", "--tp", "8", "-a", "0.8,0.7,0.6",
                         "--format", "vllm")
    assert code == 0
    budgeted = json.loads(out)["num_speculative_tokens_per_batch_size"]
    assert f"K table: {len(budgeted)} ranges under a budget of 5" in err and len(budgeted) <= 5
    code, out, err = cli("predict", "-m", "llama-3.1-70b", "-g", "h100-sxm", "--tp", "8", "-a", "0.8,0.7,0.6",
                         "--format", "vllm", "--max-ranges", "100")
    loose = json.loads(out)["num_speculative_tokens_per_batch_size"]
    assert f"K table: {len(loose)} ranges instead of" in err and "at most 0.5% of goodput" in err
    code, out, err = cli("predict", "-m", "llama-3.1-70b", "-g", "h100-sxm", "--tp", "8", "-a", "0.8,0.7,0.6",
                         "--format", "vllm", "--tolerance", "0")
    exact = json.loads(out)["num_speculative_tokens_per_batch_size"]
    assert len(exact) > len(loose) and "exact best K per batch size" in err
    code, out, _ = cli("predict", "-m", "llama-3.1-70b", "-g", "h100-sxm", "--tp", "8", "-a", "0.8,0.7,0.6",
                       "--format", "json", "--tolerance", "2%", "--max-ranges", "100")
    table = json.loads(out)["table"]
    assert table["tolerance"] == 0.02 and table["ranges_at_zero_tolerance"] == len(exact)
    assert len(table["ranges"]) <= len(loose) and table["max_goodput_loss"] <= 0.02
    assert json.loads(out)["rows_describe"].startswith("the exported table")


@pytest.mark.parametrize("text,fragment", [("1", "fraction"), ("abc", "cannot read"), ("-1%", "[0%, 100%)"),
                                           ("100%", "[0%, 100%)")])
def test_bad_tolerance_is_one_line(cli, text, fragment):
    one_line_error(*cli("predict", *FAST, "--tolerance", text)[::2], fragment)


def test_ranges_past_the_capture_limit_are_named(cli):
    """vLLM (>= 0.24 spec: capture sizes up to 512 tokens, rounded to multiples of K + 1) replays a graph for B
    sequences of K + 1 tokens while B (K + 1) fits in the largest multiple of K + 1 not above 512, i.e. while
    B <= floor(512 / (K + 1)); the expected eager ranges are worked out from that rule alone."""
    code, out, err = cli("predict", "--format", "vllm")
    assert code == 0
    ranges = json.loads(out)["num_speculative_tokens_per_batch_size"]
    expected = []
    for start, end, k in ranges:
        first = max(start, 512 // (k + 1) + 1)
        if first <= end:
            expected.append(f"{first}-{end} (K={k})" if first < end else f"{end} (K={k})")
    assert expected                                   # the default table runs past the limit
    line = next(x for x in err.splitlines() if "run eager" in x)
    assert "batch sizes " + ", ".join(expected) + " run eager" in line
    code, _, err = cli("predict", "--format", "vllm", "--eager")
    assert "run eager" not in err                      # --eager: no graphs to fall out of


def test_a_table_whose_k_rises_where_plain_steps_lose_their_graph_says_why(cli):
    """Llama-3.1-70B on 8 H100s: K = 0 at batch 257-512, then K = 1 from 513. A step without speculation replays
    vLLM's largest graph (512 tokens) to batch 512 and runs eagerly past it, while K = 1 (2 B tokens) is eager from
    batch 257 (the rule of the test above); the note says so, at the batch the steps themselves give."""
    import numpy as np

    from dsdsim import Deployment, simulate_step
    from dsdsim.policy.predict import eager_rise_note

    code, out, _ = cli("predict", "-m", "llama-3.1-70b", "--tp", "8", "-f", "json")
    d = json.loads(out)
    assert code == 0 and [r[2] for r in d["table"]["ranges"]][-2:] == [0, 1]
    graphed = {(b, k): bool(simulate_step("llama-3.1-70b", "h100-sxm", Deployment(tp=8), batch=b, k=k,
                                          dynamic=True).verify_graphed) for b in (256, 257, 512, 513) for k in (0, 1)}
    assert graphed == {(256, 0): True, (256, 1): True, (257, 0): True, (257, 1): False,
                       (512, 0): True, (512, 1): False, (513, 0): False, (513, 1): False}
    assert any(n.startswith("K rises from 0 to 1 past batch 512: there even a step without speculation")
               for n in d["notes"])
    code, out, _ = cli("predict", "-f", "json")               # the default table falls and stays: no such note
    assert not any(n.startswith("K rises") for n in json.loads(out)["notes"])
    b = np.arange(1, 7)
    graphed_k0 = np.array([True, True, True, False, False, False])
    assert eager_rise_note(b, np.array([3, 2, 0, 1, 1, 1]), graphed_k0).startswith("K rises from 0 to 1 past batch 3")
    for k_table in ([3, 2, 1, 1, 1, 1], [3, 2, 0, 0, 1, 1], [3, 2, 0, -1, -1, -1]):     # no rise at the boundary
        assert eager_rise_note(b, np.array(k_table), graphed_k0) is None
    assert eager_rise_note(b, np.array([3, 2, 0, 1, 1, 1]), np.ones(6, dtype=bool)) is None


def test_data_parallel_attention_makes_engines_ignore_the_table(cli):
    argv = ["predict", "-m", "deepseek-v3", "-g", "h200-sxm", "--tp", "8", "--ep", "8", "--dp-attention", "-d", "mtp",
            "-a", "al=2.4@2", "-b", "1-32"]
    # one rule: an export the engine cannot use is refused (exit 2, one line, why), written only with --force
    code, out, err = cli(*argv, "--format", "vllm")
    one_line_error(code, err, "disables dynamic speculative decoding under data parallelism")
    assert out == "" and "--force" in err
    code, _, err = cli(*argv, "--format", "sglang")
    one_line_error(code, err, "does not support data-parallel attention")
    code, out, err = cli(*argv, "--format", "sglang", "--force")
    assert code == 0 and "does not support data-parallel attention" in err and json.loads(out)
    code, _, err = cli("predict", *FAST, "--format", "vllm")
    assert code == 0 and "data parallel" not in err


def test_a_version_without_dynamic_tables_is_refused_unless_forced(cli, tmp_path):
    target = tmp_path / "t.json"
    code, _, err = cli("predict", *FAST, "-e", "vllm@0.20", "--format", "vllm", "-o", target)
    one_line_error(code, err, "does not read a per-batch-size K table")
    assert not target.exists()
    code, _, err = cli("predict", *FAST, "-e", "vllm@0.20", "--format", "vllm", "-o", target, "--force")
    assert code == 0 and "does not read a per-batch-size K table" in err and target.exists()


@pytest.mark.parametrize("fmt", ["vllm", "sglang", "trtllm"])
def test_a_table_that_never_speculates_is_refused_alike(cli, fmt):
    """α = 0: every draft is rejected, τ(K) = 1 for every K, so K = 0 is best everywhere."""
    code, out, err = cli("predict", *FAST, "-a", "0", "--format", fmt)
    one_line_error(code, err, "serve without speculative decoding")
    assert out == ""
    code, out, _ = cli("predict", *FAST, "-a", "0")
    assert code == 0 and "Paste into" not in out and "serve without speculative decoding" in out


def test_no_paste_instructions_for_an_empty_table(cli):
    code, out, _ = cli("predict", "-g", "l4", "-c", "100000", "-b", "1-8")
    assert code == 0 and "no batch size fits" in out and "Paste into" not in out


def test_unevaluated_first_range_is_said_on_stderr(cli):
    code, out, err = cli("predict", "-b", "40-60", "--format", "vllm")
    assert code == 0 and json.loads(out)["num_speculative_tokens_per_batch_size"][0][0] == 1
    assert "sizes 1-39 were not evaluated" in err


@pytest.mark.parametrize("option", [["--plot", "k.png"], ["--acceptance-band", "0.1"], ["--fixed-k", "2"]])
def test_context_grid_refuses_what_it_cannot_show(cli, option, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    one_line_error(*cli("predict", "--contexts", "1024,8192", "-b", "1,2", *option)[::2], option[0])
    assert not (tmp_path / "k.png").exists()


def test_context_grid_of_a_tree_says_tree_or_plain(cli):
    code, out, _ = cli("predict", "--contexts", "1024,8192", "-b", "1,2", "--draft-tree", "4,4,16",
                       "-a", "al=3.2@tree")
    assert code == 0 and "draft tree 4,4,16" in out and "K*" not in out
    cells = [line for line in out.splitlines() if line.startswith("│")]
    assert cells and all(("tree" in c or "plain" in c) and " 4 " not in c for c in cells)
    code, out, _ = cli("predict", "--contexts", "1024,8192", "-b", "1,2", "--draft-tree", "4,4,16",
                       "-a", "al=3.2@tree", "-f", "json")
    assert json.loads(out)["draft_tree"]["k_in_rows"] == 4


def test_context_grid_is_bounded(cli):
    contexts = ",".join(str(1000 + i) for i in range(100))
    code, _, err = cli("predict", "--contexts", contexts, "-b", "1-65536")
    one_line_error(code, err, "65536 x 9 x 100")


@pytest.mark.parametrize("argv", [["predict", "-b", "1,2", "-f", "json"], ["explain", "-f", "json"],
                                  ["predict", "-b", "1,2", "-f", "vllm"]])
def test_dash_is_standard_output(cli, argv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(*argv, "-o", "-")
    assert code == 0, err
    json.loads(out)
    assert "wrote" not in err and not (tmp_path / "-").exists()


def test_dash_table_and_png_go_to_standard_output(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, _ = cli("predict", "-b", "1,2", "-o", "-")
    assert code == 0 and "Best K per batch size" in out and not (tmp_path / "-").exists()
    one_line_error(*cli("predict", "-b", "1,2", "--plot", "-")[::2], "standard output")
    pytest.importorskip("matplotlib")
    env = {"PYTHONPATH": str(REPO_ROOT), "MPLBACKEND": "Agg", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "dsdsim", "plot", "roofline", "-o", "-"], capture_output=True,
                          cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.startswith(b"\x89PNG") and not (tmp_path / "-").exists()
