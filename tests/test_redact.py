from harness.core.redact import redact


def test_passwords_never_survive():
    assert redact("mongodb://bob:s3cret@h:1/db?x=1") == "mongodb://bob:***@h:1/db?x=1"
    assert "s3cret" not in redact("postgresql://u:s3cret@h/db")
    assert redact("host=h password=s3cret user=u") == "host=h password=*** user=u"
    assert redact("mongodb://127.0.0.1:27017/") == "mongodb://127.0.0.1:27017/"
