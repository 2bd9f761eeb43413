from playbook.redact import REDACTED, redact_env, redact_known, redact_text, secret_values


def test_secret_names_are_hidden():
    env = redact_env({"GITHUB_TOKEN": "x" * 10, "AWS_SECRET_ACCESS_KEY": "abc", "MY_PASSWORD": "p", "SSH_KEY": "k",
                      "PATH": "/usr/bin"})
    assert env == {"AWS_SECRET_ACCESS_KEY": REDACTED, "GITHUB_TOKEN": REDACTED, "MY_PASSWORD": REDACTED,
                   "PATH": "/usr/bin", "SSH_KEY": REDACTED}


def test_secret_values_in_text():
    text = ("pip install --index-url https://alice:s3cr3tpass@pypi.example.com/simple x\n"
            "Authorization: Bearer abcdefghijklmnop\n"
            "using ghp_0123456789abcdefghijABCDEFGHIJ and hf_abcdefghijklmnopqrstuvwxyz0123\n"
            "HF_TOKEN=plainvalue123 make\n")
    clean = redact_text(text)
    for secret in ("s3cr3tpass", "abcdefghijklmnop", "ghp_0123456789", "hf_abcdefghij", "plainvalue123"):
        assert secret not in clean
    assert "https://alice:<redacted>@pypi.example.com/simple" in clean


def test_known_values_are_masked_verbatim():
    secrets = secret_values({"OPENAI_API_KEY": "zzz-very-private", "PATH": "/bin", "SHORT_TOKEN": "abc"})
    assert secrets == ["zzz-very-private"]
    assert redact_known("echo zzz-very-private", secrets) == f"echo {REDACTED}"


def test_ordinary_build_lines_are_untouched():
    line = "-- Found CUDAToolkit: /usr/local/cuda/include (found version \"12.4.131\")"
    assert redact_text(line) == line
