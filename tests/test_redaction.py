"""Redaction (app/services/redaction.py): every shape of secret a hook may capture is hidden, ordinary
text is left alone, and no input can make it slow: each detector is an RE2 automaton (linear by
construction), checked here on the input made to be worst for it at the hook's body limit."""

from __future__ import annotations

import asyncio
import random
import re

import pytest
import re2
from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

from app.services import redaction, secret_rules
from app.services.redaction import MARK, STEPS, check_patterns, redact, redact_off_loop
from bench.redaction import DENIED, DENY, LIMIT, shapes, worst_inputs

SHAPES = shapes(random.Random(11))


@pytest.mark.parametrize(("name", "text", "secret"), [*SHAPES, *DENIED], ids=[s[0] for s in [*SHAPES, *DENIED]])
def test_every_shape_of_secret_is_redacted(name: str, text: str, secret: str) -> None:
    out, count = redact(text, DENY)
    assert secret not in out and count >= 1 and MARK in out, out


# One made-up value for each of detect-secrets' regex detectors (the package ships no fixtures).
PLUGIN_EXAMPLES = {
    "AWSKeyDetector": "aws_secret_key = 'Jx1m3F0Fk5Q2cHh6cGk9WQ9kdn5uZk3jYy0Q1aBc'",
    "ArtifactoryDetector": "artifactory AKCp8jQ7vk2EXAMPLE4Tj9",
    "AzureStorageKeyDetector": "AccountKey=" + "A1b2C3d4" * 11,
    "BasicAuthDetector": "https://user:pa55word@example.com",
    "CloudantDetector": "cloudant_password='" + "a1b2c3d4" * 8 + "'",
    "DiscordBotTokenDetector": "MTk4NjIyNDgzNDcxOTI1MjQ4.Cl2FMQ.ZnCjm1XVW7vRze4b7Cq4se7kKWs",
    "GitHubTokenDetector": "ghp_" + "a1B2c3D4e5" * 3 + "f6G7h8",
    "GitLabTokenDetector": "glpat-" + "x1Y2z3W4v5" * 2,
    "IbmCloudIamDetector": "ibm_cloud_iam_key: '" + "a1B2c3D4e5F6g7H8i9J0" * 2 + "k1L2'",
    "IbmCosHmacDetector": "ibm_cos_hmac_secret_access_key = '" + "a1b2c3d4" * 6 + "'",
    "JwtTokenDetector": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlLWhlcmU",
    "MailchimpDetector": "0123456789abcdef0123456789abcdef-us12",
    "NpmDetector": "//registry.npmjs.org/:_authToken=npm_" + "a1B2c3" * 6,
    "OpenAIDetector": "sk-" + "a1B2c3D4e5" * 2 + "T3BlbkFJ" + "f6G7h8I9j0" * 2,
    "PrivateKeyDetector": "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIB\n-----END EC PRIVATE KEY-----",
    "PypiTokenDetector": "pypi-AgEIcHlwaS5vcmc" + "a1B2c3D4e5" * 7,
    "SendGridDetector": "SG." + "a1B2c3D4e5F6g7H8i9J0k1" + "." + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8s9T0u1V",
    "SlackDetector": "xoxb-123456789012-1234567890123-" + "a1B2c3D4e5F6g7H8i9J0k1L2",
    "SoftlayerDetector": "softlayer_api_key = '" + "a1b2c3d4" * 8 + "'",
    "SquareOAuthDetector": "sq0csp-" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8s9T0u1V",
    "StripeDetector": "sk_live_" + "a1B2c3D4e5F6g7H8i9J0k1L2",
    "TelegramBotTokenDetector": "123456789:" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r",
    "TwilioKeyDetector": "SK" + "0123456789abcdef" * 2,
}


def test_each_detect_secrets_detector_is_loaded_and_finds_its_example() -> None:
    loaded = {r.name.split(".")[1] for r in redaction.RULES if r.plugin}
    plugins = {c.__name__ for c in get_mapping_from_secret_type_to_class().values() if getattr(c, "denylist", None)}
    assert secret_rules.plugin_rules()[1] == []  # every pattern compiles once rewritten for RE2
    assert loaded == plugins - secret_rules.LEFT_OUT == set(PLUGIN_EXAMPLES)
    for name, example in PLUGIN_EXAMPLES.items():
        rules = [r for r in redaction.RULES if r.name.startswith(f"detect_secrets.{name}.")]
        assert any(r.regex.search(example.encode()) for r in rules), name
        assert redact(example)[1] >= 1, name


@pytest.mark.parametrize(
    "text",
    [
        "We moved the meeting to Thursday, bring the slides.",
        "Password: make it long and unique.",  # a plain word after `key:` in prose
        "the token: it expires hourly",
        "max_tokens=1024 and temperature=0.2",
        "export API_KEY=$OPENAI_API_KEY",  # a reference, not a value
        '"Authorization": "Bearer $ENGRAM_API_KEY"',
        "postgres://app:...@db/shop and postgres://app:<password>@db",
        "commit 3f2a9c1e4b7d8a6f5e0c9b8a7d6e5f4c3b2a1908 fixed it",  # hex: a hash, not a key
        "see app/services/redaction.py and tests/test_redaction.py",
        "validate_token_resource=True, existingSecret: engram-db-app",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact(text) == (text, 0)


def test_what_is_around_a_secret_stays() -> None:
    assert redact("postgres://app:s3cretpass@db.internal/shop")[0] == f"postgres://app:{MARK}@db.internal/shop"
    assert redact("DB_PASSWORD=Tr0ub4dor&3 make")[0] == f"DB_PASSWORD={MARK} make"
    assert redact("Authorization: Bearer abcdef123456789")[0] == f"Authorization: Bearer {MARK}"
    assert redact("my password is hunter2.", ["hunter?"]) == (f"my password is {MARK}.", 1)
    assert redact("(ACME-4411), ACME-9", ["ACME-*"]) == (f"({MARK}), {MARK}", 2)
    assert redact("xACME-1 hunter22", ["ACME-*", "hunter?"]) == ("xACME-1 hunter22", 0)  # whole words only
    assert redact("héllo wörld 日本語 password=s3cr3t!x 終わり")[0] == f"héllo wörld 日本語 password={MARK} 終わり"


def test_a_key_wrapped_across_lines_is_redacted_whole() -> None:
    key = "ghp_" + "a1B2c3D4e5" * 3 + "f6G7h8"
    out, _ = redact(f"token: {key[:24]}\n{key[24:]}\nthen push")
    assert key[:24] not in out and key[24:] not in out and out.endswith("\nthen push")
    pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\nQUJDRA==\n-----END OPENSSH PRIVATE KEY-----"
    assert redact(f"key:\n{pem}\nok") == (f"key:\n{MARK}\nok", 1)


def test_every_pattern_is_an_re2_automaton() -> None:
    """Linear time by construction: RE2 has no backtracking, whatever the pattern."""
    for regex in [
        *(r.regex for r in redaction.RULES),
        redaction._KEYWORD,
        redaction._CONTINUATION,
    ]:
        assert isinstance(regex, re2._Regexp)
    # The entropy candidates' one exception, for its cheaper match objects: a run of one character
    # class and a bounded tail, which a backtracking engine also walks in linear time.
    assert re.fullmatch(rb"\[[^\]]+\]\{20,\}=\{0,2\}", redaction._CANDIDATE.pattern)
    assert isinstance(redaction._globs(("ACME-*", "a*b*c*d*e")), re2._Regexp)


@pytest.mark.parametrize("name", list(worst_inputs(1024)))
def test_worst_inputs_at_the_body_limit(name: str) -> None:
    """Each input made to be slow for some detector, at 256 KB: a right answer (the secrets gone, or
    the text left as it was, or withheld whole when it holds more than STEPS findings)."""
    text = worst_inputs()[name]
    assert len(text) == LIMIT
    out, count = redact(text, DENY)
    if count == 0:
        assert out == text
    else:
        assert MARK in out and "AKIAIOSFODNN7EXAMPLE" not in out and "hunter2" not in out


def test_the_quadratic_prompt_of_old_is_left_as_it_is() -> None:
    text = "authorization:" + " " * 24000 + "!"
    assert redact(text) == (text, 0)


def test_a_text_with_more_findings_than_the_budget_is_withheld_whole() -> None:
    many = " ".join(f"AKIA{i:016d}" for i in range(STEPS + 1))
    assert redact(many) == (MARK, 1)
    some = " ".join(f"AKIA{i:016d}" for i in range(10))
    assert redact(some) == (" ".join([MARK] * 10), 10)


def test_redaction_off_the_loop_leaves_the_loop_free() -> None:
    """Texts of 256 KB redacted in worker threads while a timer ticks on the loop: the ticks go on."""

    async def run() -> tuple[list[tuple[str, int]], int]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0)
                ticks += 1

        ticker = asyncio.create_task(tick())
        texts = [worst_inputs()[n] for n in ("spaces", "password= repeated", "deny-listed words")]
        done = await asyncio.gather(*(redact_off_loop(t, DENY) for t in texts))
        ticker.cancel()
        return done, ticks

    done, ticks = asyncio.run(run())
    assert [c for _, c in done] == [0, 1, 1] and ticks > 10


def test_deny_patterns_are_checked() -> None:
    assert check_patterns(["ACME-*", "hunter?"]) == ["ACME-*", "hunter?"]
    for bad in (["*"], ["a b"], ["x" * 201], ["p"] * 101):
        with pytest.raises(ValueError):
            check_patterns(bad)
