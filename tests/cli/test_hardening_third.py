"""Issue 47's input cases that gave a traceback (exit 3) or echoed a secret: each is now one line naming
the input, exit 2 (or exit 1 where `deploy check` lists what is missing), and no password is printed in
any PostgreSQL location form."""

from __future__ import annotations

import shutil
from pathlib import Path

from ragspine_pipeline.cli import main

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "s3cr3t-Passw0rd"


def one_line(capsys) -> tuple[str, str]:
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return out, err


def test_init_on_a_dangling_symbolic_link_is_one_line(tmp_path, capsys):
    link = tmp_path / "support-bot"
    link.symlink_to(tmp_path / "nowhere")
    assert main(["init", str(link)]) == 2
    _, err = one_line(capsys)
    said = f"{link}: is a symbolic link to nothing: init writes a new project in a folder"
    assert err == f"ragspine-eval: error: {said}\n"


def test_a_backfill_reaching_before_year_one_is_one_line(tmp_path, capsys):
    argv = ["production", "backfill", "--store", str(tmp_path), "--reports", str(tmp_path / "reports")]
    assert main([*argv, "--days", "2", "--until", "0001-01-01"]) == 2
    _, err = one_line(capsys)
    assert err == (
        "ragspine-eval: error: production backfill: --days 2 up to --until 0001-01-01 would start before "
        "0001-01-01\n"
    )
    assert main([*argv, "--days", "1", "--until", "0001-01-01"]) == 0  # the first day there is: fine
    assert one_line(capsys)[0] == "0001-01-01: no traces\n"


def test_deploy_check_with_a_port_that_is_not_a_number_says_so(tmp_path, monkeypatch, capsys):
    home = tmp_path / "dagster"
    home.mkdir()
    shutil.copyfile(ROOT / "deploy" / "postgres" / "dagster.yaml", home / "dagster.yaml")
    for name, value in {
        "DAGSTER_HOME": str(home),
        "DAGSTER_PG_HOST": "127.0.0.1",
        "DAGSTER_PG_PORT": "abc",
        "DAGSTER_PG_DB": "dagster",
        "DAGSTER_PG_USER": "dagster",
        "DAGSTER_PG_PASSWORD": "",
    }.items():
        monkeypatch.setenv(name, value)
    assert main(["deploy", "check", "--module", ""]) == 1
    out, _ = one_line(capsys)
    assert "PostgreSQL 127.0.0.1:abc/dagster as dagster: the port is not a number: 'abc'\n" in out


def test_no_form_of_a_postgresql_location_prints_its_password(tmp_path, monkeypatch, capsys):
    keyword = f"host=127.0.0.1 port=1 dbname=evals user=u password={PASSWORD}"
    assert main(["alerts", "list", "--outbox", keyword]) == 2
    _, err = one_line(capsys)
    assert PASSWORD not in err and "password=***: a keyword-form PostgreSQL location" in err
    assert not list(tmp_path.iterdir()) and not Path(keyword).exists()  # never taken for a file name

    home = tmp_path / "dagster"
    home.mkdir()
    (home / "dagster.yaml").write_text("")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("RAGSPINE_ALERTS_OUTBOX", f"postgresql://u:{PASSWORD}@[::1")  # malformed
    assert main(["deploy", "check", "--module", ""]) == 1
    out, err = one_line(capsys)
    assert PASSWORD not in out + err
    assert "RAGSPINE_ALERTS_OUTBOX: cannot connect: invalid dsn: " in out and "postgresql://u:***@[::1" in out


def test_init_refuses_a_service_name_or_url_that_would_break_the_files_it_writes(tmp_path, capsys):
    """A quote in --service would break pyproject.toml, a newline in --sut-url would add keys to
    sut.yaml: both are refused in one line and nothing is written; a URL with `#` is written quoted, so
    sut.yaml reads it back whole."""
    import yaml

    assert main(["init", str(tmp_path / "a"), "--service", 'a"b']) == 2
    assert "init: --service 'a\"b': a service name is lower-case letters" in one_line(capsys)[1]
    assert main(["init", str(tmp_path / "b"), "--sut-url", "http://x/a\nretries: 99"]) == 2
    assert "init: --sut-url 'http://x/a\\nretries: 99': not an http:// or https:// URL" in one_line(capsys)[1]
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    url = "http://127.0.0.1:9/answer?v=1#frag"
    assert main(["init", str(tmp_path / "Café Bot"), "--sut-url", url]) == 0
    capsys.readouterr()
    project = tmp_path / "Café Bot"
    assert yaml.safe_load((project / "sut.yaml").read_text())["url"] == url
    assert (project / "caf_bot_evaluation" / "defs" / "caf_bot" / "defs.yaml").exists()


def test_sut_settings_that_hung_or_crashed_the_replay_are_one_line(tmp_path, capsys):
    """`timeout_s: .inf` (a traceback from the socket), a FIFO named as the settings (a replay that hung
    for ever) and a key given twice (the last one silently kept) are each one line, exit 2."""
    import os

    gold = tmp_path / "gold.jsonl"
    gold.write_text('{"qid": "a", "question": "q", "answerable": true}\n')
    argv = ["replay", "--gold", str(gold), "--out", str(tmp_path / "traces.jsonl"), "--sut"]
    infinite = tmp_path / "infinite.yaml"
    infinite.write_text("kind: http\nurl: http://127.0.0.1:9/a\ntimeout_s: .inf\n")
    assert main([*argv, str(infinite)]) == 2
    assert "infinite.yaml: field 'http.timeout_s': Input should be a finite number" in one_line(capsys)[1]
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert main([*argv, str(fifo)]) == 2  # at once: nothing opens it for writing
    assert "cannot read the SUT settings: not a regular file (a FIFO)" in one_line(capsys)[1]
    twice = tmp_path / "twice.yaml"
    twice.write_text("kind: http\nurl: http://127.0.0.1:9/a\nurl: http://127.0.0.1:9/b\n")
    assert main([*argv, str(twice)]) == 2
    assert one_line(capsys)[1] == f"ragspine-eval: error: {twice}:3: duplicate key 'url' (first on line 2)\n"
    assert not (tmp_path / "traces.jsonl").exists()


def test_a_byte_order_mark_opening_a_trace_file_is_one_rule_for_every_reader(tmp_path, capsys):
    """A file saved by a Windows tool starts with a BOM: the scorer read it, the nightly sampler
    quarantined its first line. Both now skip it, and read every trace."""
    import json

    wfgy = ROOT / "examples" / "wfgy"
    text = (wfgy / "traces.jsonl").read_text()
    n = len(text.splitlines())
    day = tmp_path / "store" / "dt=2026-11-28"
    day.mkdir(parents=True)
    (day / "part-0.jsonl").write_bytes(b"\xef\xbb\xbf" + text.encode())
    argv = ["sample", "--source", str(tmp_path / "store"), "--date", "2026-11-28", "--n", str(n)]
    assert main([*argv, "--seed", "1", "--out", str(tmp_path / "s.jsonl")]) == 0
    out, err = one_line(capsys)
    counts = json.loads((out + err).strip().splitlines()[-1])
    assert counts["valid"] == counts["read"] == n and counts["quarantined"]["invalid_json"] == 0
    report = tmp_path / "r.json"
    argv = ["score", "--gold", str(wfgy / "gold.jsonl"), "--trace", str(day / "part-0.jsonl")]
    assert main([*argv, "--out", str(report)]) == 0
    assert json.loads(report.read_text())["traces"] == n


def test_trace_objects_that_are_not_regular_files_are_named_when_skipped(tmp_path, caplog):
    """A FIFO or a folder named like a trace object is skipped (never opened, never waited on) and the
    skip is said, with their names; the regular objects are read."""
    import os

    wfgy = ROOT / "examples" / "wfgy"
    day = tmp_path / "store" / "dt=2026-11-28"
    day.mkdir(parents=True)
    (day / "part-0.jsonl").write_text((wfgy / "traces.jsonl").read_text())
    os.mkfifo(day / "part-1.jsonl")
    (day / "part-2.jsonl.gz").mkdir()
    argv = ["sample", "--source", str(tmp_path / "store"), "--date", "2026-11-28", "--n", "5", "--seed", "1"]
    assert main([*argv, "--out", str(tmp_path / "s.jsonl")]) == 0
    assert (
        f"{day}: 2 trace object(s) skipped, not regular files: part-1.jsonl, part-2.jsonl.gz" in caplog.text
    )
    assert len((tmp_path / "s.jsonl").read_text().splitlines()) == 5
