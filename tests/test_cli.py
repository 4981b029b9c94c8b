"""The command-line contract of the foundation."""
import json
import subprocess
import sys

import pytest

from memsym.cli import main


def run_json(capsys, *argv):
    assert main(list(argv) + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_estimate_defaults_are_the_papers_layout(capsys):
    d = run_json(capsys, "estimate")
    assert d["params"] == {"non_moe": 429719552, "moe": 5820645376, "total": 6250364928}
    assert d["bytes"]["weights"] == 12500729856
    assert d["bytes"]["gradients"] == 25001459712
    assert d["bytes"]["optimizer"] == 50002919424
    assert d["bytes"]["activations"] == 24671158272
    assert d["bytes"]["total"] == sum(d["bytes"][k] for k in ("weights", "gradients", "optimizer", "activations"))


@pytest.mark.parametrize("zero, key, value", [("1", "optimizer", 5928075264), ("2", "gradients", 2964037632),
                                              ("3", "weights", 1482018816)])
def test_zero_stages(capsys, zero, key, value):
    assert run_json(capsys, "estimate", "--zero", zero)["bytes"][key] == value


def test_recompute_and_mbs_scale(capsys):
    full = run_json(capsys, "estimate", "--recompute", "full")["bytes"]["activations"]
    assert full == 235143168
    one = run_json(capsys, "estimate")["bytes"]["activations"]
    for mbs in (2, 4):
        assert run_json(capsys, "estimate", "--mbs", str(mbs))["bytes"]["activations"] == mbs * one
        full_mbs = run_json(capsys, "estimate", "--mbs", str(mbs), "--recompute", "full")
        assert full_mbs["bytes"]["activations"] == mbs * full


def test_params_totals(capsys):
    d = run_json(capsys, "params")
    assert d["total"] == 671026397184
    assert d["stages"][0]["params"] == 14184415232
    assert sum(s["params"] for s in d["stages"]) == d["total"]
    assert run_json(capsys, "params", "--accounting", "checkpoint")["total"] == 671026419200


def test_reproduce_exits_zero(capsys):
    assert main(["reproduce"]) == 0
    out = capsys.readouterr().out
    assert "0 unexplained" in out and "sum of rounded" in out


@pytest.mark.parametrize("argv, needle", [
    (["estimate", "--tp", "3"], "n_h"), (["estimate", "--ep", "7"], "EP=7"), (["estimate", "--stage", "16"], "stage"),
    (["estimate", "--model", "nope"], "unknown model"), (["estimate", "--mbs", "0"], "mbs"),
    (["estimate", "--pp", "99"], "PP=99"), (["estimate", "--dp", "abc"], "dp"),
])
def test_invalid_input_exits_2_with_one_line(argv, needle):
    p = subprocess.run([sys.executable, "-m", "memsym", *argv], capture_output=True, text=True)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    assert needle in p.stderr
    assert len(p.stderr.strip().splitlines()) <= 2  # argparse adds its usage line


def test_terms_lists_ids(capsys):
    assert main(["terms"]) == 0
    out = capsys.readouterr().out
    for tid in ("act.mla.layer", "static.device.total", "zero.optimizer.sharded", "params.stage"):
        assert tid in out


@pytest.mark.parametrize("argv", [["estimate", "--model", "a\nb.json"],
                                  ["search", "--gpus", "64", "--csv", "x/\n/y.csv"],
                                  ["verify", "\n", "--against", "nope", "--", "--latex", "--assume", "\n", "--"]])
def test_a_newline_typed_in_an_argument_is_escaped_in_the_one_error_line(argv, capsys, tmp_path, monkeypatch):
    """Exit 2 promises one line on stderr: a path or argument holding a newline is shown as \\n (found by the
    20,000-case fuzz run: a file named '\\n' gave a two-line error)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        sys.exit(main(argv))
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "\\n" in err, err


@pytest.mark.parametrize("value", ["\n", "", "paper,,megatron", "paper,paper", "paper,nope"])
def test_compare_refuses_a_preset_list_it_cannot_read(value):
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "memsym", "compare", "--conventions", value], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--conventions" in p.stderr


def test_tex_shows_control_characters_as_their_codes():
    from memsym.report.text import tex_escape
    out = tex_escape("a\x7fb\x1bc\u0085d\u009be")
    assert all(c.isprintable() for c in out) and "x7f" in out and "x9b" in out


@pytest.mark.parametrize("argv, hint", [
    (["estimate", "--tpp", "2"], "--tpp: did you mean --tp"),
    (["fit", "--hmb", "80GiB"], "did you mean --mbs or --hbm?"),
    (["estimate", "--recompte=full"], "--recompte: did you mean --recompute"),
    (["search", "--gpus", "8", "--gpus-per-nde", "4"], "did you mean --gpus-per-node"),
])
def test_a_mistyped_option_gets_did_you_mean_from_its_own_command(capsys, argv, hint):
    from clirun import run
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and hint in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("argv, hint", [(["sarch", "--gpus", "8"], "did you mean search?"),
                                        (["estimat"], "did you mean estimate?"),
                                        (["estimate", "--attention", "flsh"], "did you mean flash?"),
                                        (["estimate", "--gpu", "gb20"], "'gb20' (did you mean gb200 or b200 or gb300"),
                                        (["search", "--gpus", "8", "--gpu", "h80"], "(did you mean h800?)"),
                                        (["estimate", "--model", "deepseek-v33"], "(did you mean deepseek-v3 or "),
                                        (["estimate", "--recipe", "deepseek-v"], "(did you mean deepseek-v3?)"),
                                        (["runs", "--conventions", "mcor"], "(did you mean mcore or mcore-te?)")])
def test_a_mistyped_command_or_choice_gets_did_you_mean(capsys, argv, hint):
    from clirun import run
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and hint in err and len(err.strip().splitlines()) == 1, err


def test_an_unknown_option_far_from_every_other_gets_no_guess(capsys):
    from clirun import run
    code, _, err = run(capsys, "estimate", "--zzzz", "2")
    assert code == 2 and "unrecognized arguments: --zzzz 2" in err and "did you mean" not in err


@pytest.mark.parametrize("argv, line", [
    (["estimate", "--tpp", "2"], "memsym estimate: error: unrecognized arguments: --tpp 2 (--tpp: did you mean --tp"),
    (["compare", "--schedule", "1f1b"], "memsym compare: error: unrecognized arguments: --schedule 1f1b\n")])
def test_an_unknown_option_is_named_by_its_command_and_guessed_by_its_name_not_its_dashes(capsys, argv, line):
    """(adversarial review F8: `memsym: error:` for a subcommand's option; `--schedule: did you mean --help?`, the
    shared `--` carrying difflib's ratio over its cutoff)"""
    from clirun import run
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.startswith(line), err


def test_help_all_before_a_command_is_the_whole_help(capsys):
    """`memsym --help-all` is the top help (it was refused, suggesting itself: adversarial review F8)."""
    from memsym.cli import main
    with pytest.raises(SystemExit) as exc:
        main(["--help-all"])
    out, err = capsys.readouterr()
    assert exc.value.code == 0 and err == "" and out.startswith("usage: memsym") and "estimate" in out


def test_help_is_short_and_help_all_whole(capsys):
    """--help: each option's first clause, the usage and description short (under 100 lines for every command);
    --help-all: every option's whole help and every convention switch."""
    from memsym.cli import main
    from memsym.commands import COMMANDS
    for name in COMMANDS:
        for flag in ("--help", "--help-all"):
            with pytest.raises(SystemExit):
                main([name, flag])
            out = capsys.readouterr().out
            if flag == "--help":
                assert len(out.splitlines()) < 100, (name, len(out.splitlines()))
                short = out
            else:
                assert len(out) >= len(short)
    with pytest.raises(SystemExit):
        main(["estimate", "--help-all"])
    whole = capsys.readouterr().out
    assert "--routed-tokens" in whole and "(default" in whole


@pytest.mark.parametrize("argv", [["estimate", "--global-batch", str(2 ** 30)], ["fit", "--hbm", "80GiB",
                                                                                   "--global-batch", str(2 ** 30)],
                                  ["estimate", "--global-batch", "32", "--schedule", "dualpipe"]])
def test_a_global_batch_refusal_names_the_global_batch(capsys, argv):
    """Review of issue 46: a typed --global-batch whose m = G / (DP mbs) is out of range (or odd under DualPipe) is
    refused naming --global-batch, not an untyped --microbatches."""
    from clirun import run
    code, _, err = run(capsys, *argv)
    assert code == 2 and len(err.splitlines()) == 1 and "--global-batch" in err, err
    assert "got --microbatches" not in err and "(--microbatches)" not in err, err


@pytest.mark.parametrize("argv", [["search", "--gpus", "0"], ["search", "--gpus", "8", "--hbm", "1GiB", "--model",
                                                                  "nope"], ["estimate", "--mbs", "0"],
                                  ["estimate", "--global-batch", "7"], ["fit", "--dp", "3", "--hbm", "8GiB"]])
def test_every_refusal_has_one_prefix(capsys, argv):
    """argparse's refusals and memsym's own (ConfigError) start alike: ``memsym CMD: error:``."""
    from clirun import run
    code, _, err = run(capsys, *argv)
    assert code == 2 and err.startswith(f"memsym {argv[0]}: error: ") and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("command, flag, brief", [("fit", "--overheads", "end of the Sec. 6 ranges"),
                                                  ("search", "--sort", "order: time, bubble, peak or headroom")])
def test_brief_help_is_cut_at_a_clause_not_mid_phrase(capsys, command, flag, brief):
    """--help's first clause is not cut at an abbreviation ("Sec. 6") nor leaves a nested parenthesis' tail
    ("bubbles,/")."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert f"{flag} " in out and brief in out and "bubbles,/" not in out, out
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    assert "Solves the Sec. 6 budget" in capsys.readouterr().out


def test_search_under_a_schedule_without_m_is_refused(capsys):
    """search --schedule without --global-batch or --microbatches printed m = -1 and negative step times ranked
    first; it is refused on one line."""
    from clirun import run
    code, out, err = run(capsys, "search", "--gpus", "256", "--schedule", "1f1b")
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and "--global-batch" in err, err
    code, out, err = run(capsys, "search", "--gpus", "256", "--schedule", "1f1b", "--microbatches", "32", "--top", "3",
                         "--json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert rows and all(r["microbatches"] == 32 and r["step_time"] > 0 for r in rows), rows
