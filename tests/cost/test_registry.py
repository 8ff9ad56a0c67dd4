"""The rule registries: a new opcode rule or custom-call target rule is one decorated function;
a duplicate is refused; an exception inside a rule is an engine bug, not an uncounted op."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

import hloparse
from hloflops import analyze
from hloflops.cost import registry, rules  # noqa: F401  (importing rules registers every built-in rule)
from hloflops.cost.costs import Cost
from hloflops.cost.registry import Charge, Ctx, NotCounted, register_custom_call, register_rule
from hloflops.cost.shapes import elements

TEXT = """HloModule m

ENTRY main {
  p = f32[4,8]{1,0} parameter(0)
  c = f32[4,8]{1,0} custom-call(p), custom_call_target="my_lib.kernel", backend_config="{\\"n\\": 3}"
  ROOT t = f32[4,8]{1,0} tanh(c)
}
"""


@contextmanager
def _registered(table: dict, key: str):
    """Undo a registration the test made, whatever happens."""
    try:
        yield
    finally:
        table.pop(key, None)


def test_a_duplicate_opcode_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="opcode 'tanh' already has a cost rule"):
        register_rule("tanh")(lambda ctx: Charge())


def test_a_duplicate_custom_call_target_is_refused() -> None:
    with pytest.raises(ValueError, match=r"target '__cublas\$gemm' already has a rule"):
        register_custom_call("__cublas$gemm")(lambda ctx: Cost())
    with pytest.raises(ValueError, match=r"target 'xla\.sdy\.\*' already has a rule"):
        register_custom_call("xla.sdy.*")(lambda ctx: Cost())


def test_custom_call_lookup_exact_name_then_longest_prefix() -> None:
    assert registry.custom_call_rule("__cublas$lt$matmul$f8").__name__ == "_gemm"
    assert registry.custom_call_rule("xla.sdy.GlobalToLocalShape").__name__ == "_annotation"
    assert registry.custom_call_rule("lapack_dgetrf_ffi").__name__ == "_lapack_getrf"
    assert registry.custom_call_rule("lapack_dgeqrf_ffi") is None


def test_an_unregistered_target_is_uncounted_with_its_name() -> None:
    report = analyze(TEXT)
    reasons = [(u.name, u.reason) for u in report.uncounted]
    assert reasons == [("c", "custom-call target my_lib.kernel: arithmetic unknown")]


def test_a_registered_target_is_counted_and_can_refuse_with_a_reason() -> None:
    def kernel(ctx: Ctx) -> Cost:
        n = ctx.instruction.backend_config.get("n")
        if n is None:
            raise NotCounted("no n in backend_config")
        return Cost(n * elements(ctx.shape), 0, 0)

    with _registered(registry.CUSTOM_CALL_PREFIXES, "my_lib."):
        register_custom_call("my_lib.*")(kernel)
        report = analyze(TEXT)
        assert report.uncounted == ()
        assert report.flops == 3 * 32
        assert report.transcendentals == 32
        refused = analyze(TEXT.replace('backend_config="{\\"n\\": 3}"', 'backend_config="{}"'))
        assert [u.reason for u in refused.uncounted] == ["custom-call target my_lib.kernel: no n in backend_config"]


def test_an_exception_inside_a_rule_is_an_engine_error_not_uncounted() -> None:
    def broken(ctx: Ctx) -> Charge:
        raise KeyError("a bug")

    saved = registry.RULES.pop("tanh")
    try:
        register_rule("tanh")(broken)
        with pytest.raises(KeyError, match="a bug"):
            analyze(hloparse.parse(TEXT))
    finally:
        registry.RULES["tanh"] = saved


def test_an_unknown_opcode_is_uncounted() -> None:
    saved = registry.RULES.pop("tanh")
    try:
        report = analyze(TEXT)
        assert "unknown opcode 'tanh'" in [u.reason for u in report.uncounted]
    finally:
        registry.RULES["tanh"] = saved


def test_an_instruction_with_too_few_operands_is_uncounted() -> None:
    # (dynamic_slice_sizes given: without it the parser rejects the module, as XLA's does)
    sliced = "dynamic-slice(p), dynamic_slice_sizes={4,8}"
    text = TEXT.replace("tanh(c)", f"tanh(c)\n  d = f32[4,8]{{1,0}} {sliced}").replace("ROOT t", "t")
    text = text.replace(sliced, sliced + "\n  ROOT r = (f32[4,8]{1,0}, f32[4,8]{1,0}) tuple(t, d)")
    report = analyze(text)
    assert "dynamic-slice: cannot cost (IndexError: tuple index out of range)" in [u.reason for u in report.uncounted]
    assert report.accounting.xla_estimate == {}  # XLA's handler would read the missing operand too


def test_the_cli_reports_an_engine_bug_with_exit_status_3(tmp_path, capsys) -> None:
    from hloflops.cli import EXIT_INTERNAL, main

    def broken(ctx: Ctx) -> Charge:
        raise IndexError("a bug")

    path = tmp_path / "m.hlo"
    path.write_text(TEXT)
    saved = registry.RULES.pop("tanh")
    try:
        register_rule("tanh")(broken)
        assert main([str(path)]) == EXIT_INTERNAL
        assert "internal error: IndexError" in capsys.readouterr().err
    finally:
        registry.RULES["tanh"] = saved
