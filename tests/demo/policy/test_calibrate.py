from demo.policy.calibrate import main


def test_calibration_runs_end_to_end_on_a_tiny_budget(demo_base_policy, capsys):
    argv = ["--base", str(demo_base_policy), "--iterations", "1", "--sessions", "3", "--eval-sessions", "3"]
    assert main(argv) == 0
    assert main([*argv, "--reward", "library"]) == 0
    out = capsys.readouterr().out
    assert out.count("before |") == 4 and out.count("after  |") == 2 and "iter   0 | served" in out
