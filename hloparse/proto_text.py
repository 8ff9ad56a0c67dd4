"""An `HloModuleProto` printed as HLO text, without jax: the protobuf wire reader
(`hloparse.protowire`) and the field numbers of XLA's `hlo.proto` and `xla_data.proto`.

The text is then parsed as any other, so its checks and rules are those of text. This covers
the fields the opcodes of the corpus and of jax programs use; a field it does not know is an
error that names it (`UnsupportedProto`), never a field silently left out: `hloparse.inputs`
then asks jaxlib, where installed, to print the module instead.

Known and deliberately not printed (they do not change what a module computes or costs):
instruction and computation ids (used only to resolve references), the module's id, schedule
(`is_scheduled=true` is printed; the proto's instruction order is already a valid order),
device assignment, profile info, cross-program prefetches, SPMD parameter/output shardings,
`statistics_viz`, `original_value` and an instruction's `result_accuracy` (a numerical choice).
"""

from __future__ import annotations

from hloparse.proto_values import (Message, UnsupportedProto, _ints, _quote, device_list_text, dim_labels_text,
                                   frontend_attributes_text, literal_text, metadata_text, replica_groups_text,
                                   shape_text, sharding_text, window_text)
from hloparse.protowire import WireError


# ---- instructions -----------------------------------------------------------------------
# HloInstructionProto fields, by number: what each is called, for errors about ones not read.
INSTRUCTION_FIELDS = {
    1: "name", 2: "opcode", 3: "shape", 7: "metadata", 8: "literal", 9: "parameter_number", 11: "fusion_kind",
    13: "tuple_index", 14: "dimensions", 15: "window", 16: "convolution_dimension_numbers", 17: "slice_dimensions",
    18: "exponent_bits", 19: "mantissa_bits", 20: "dynamic_slice_sizes", 21: "padding_config", 22: "outfeed_config",
    23: "distribution", 24: "epsilon", 25: "feature_index", 26: "channel_id", 27: "infeed_config",
    28: "custom_call_target", 29: "outfeed_shape", 30: "dot_dimension_numbers", 31: "fft_type", 32: "fft_length",
    33: "gather_dimension_numbers", 34: "gather_slice_sizes", 35: "id", 36: "operand_ids",
    37: "control_predecessor_ids", 38: "called_computation_ids", 40: "sharding", 43: "backend_config",
    45: "all_reduce_id", 47: "is_host_transfer", 48: "scatter_dimension_numbers", 49: "replica_groups",
    50: "feature_group_count", 51: "precision_config", 52: "source_target_pairs", 54: "domain_entry_sharding",
    55: "domain_exit_sharding", 56: "constrain_layout", 57: "operand_shapes_with_layout",
    58: "batch_group_count", 59: "triangular_solve_options", 60: "is_stable", 61: "parameter_replication",
    62: "cholesky_options", 63: "comparison_direction", 65: "custom_call_has_side_effect",
    66: "delta", 67: "indices_are_sorted", 68: "frontend_attributes", 69: "unique_indices", 70: "rng_algorithm",
    71: "use_global_device_ids", 72: "comparison_type", 73: "is_cross_program_prefetch",
    74: "output_operand_aliasing", 75: "padding_type", 76: "custom_call_schedule",
    77: "custom_call_api_version", 79: "async_execution_thread", 80: "cross_program_prefetch_index", 81: "k",
    82: "statistics_viz", 85: "largest", 86: "dot_sparsity", 87: "collective_device_list", 88: "original_value",
    89: "is_composite", 90: "ragged_dot_dimension_numbers", 91: "result_accuracy",
}
READ = {1, 2, 3, 7, 8, 9, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 23, 24, 25, 26, 28, 29, 30, 31, 32, 33, 34, 35, 36,
        37, 38, 40, 43, 47, 48, 49, 50, 51, 52, 56, 57, 58, 59, 60, 61, 62, 63, 65, 66, 67, 68, 69, 70, 71, 72, 74, 77,
        79, 80, 81, 82, 85, 87, 88, 89, 91}
TO_APPLY = frozenset({"reduce", "reduce-window", "all-reduce", "all-reduce-start", "reduce-scatter", "scatter",
                      "sort", "map", "call"})
API_VERSIONS = {1: "API_VERSION_ORIGINAL", 2: "API_VERSION_STATUS_RETURNING",
                3: "API_VERSION_STATUS_RETURNING_UNIFIED", 4: "API_VERSION_TYPED_FFI"}
PRECISIONS = {0: "default", 1: "high", 2: "highest"}


def _dims_text(m: Message, *numbers_and_keys: tuple[int, str]) -> list[str]:
    return [f"{key}={_ints(m.ints(n))}" for n, key in numbers_and_keys if m.ints(n)]


def instruction_text(m: Message, names: dict[int, str], computations: dict[int, str], is_root: bool,
                     pred_ids: frozenset[int] = frozenset()) -> str:
    name, opcode = m.str(1), m.str(2)
    m.what = f"instruction {name!r} ({opcode})"
    m.check(READ, INSTRUCTION_FIELDS)
    shape = m.msg(3, m.what + " shape")
    if shape is None:
        raise UnsupportedProto(f"{m.what}: no shape")
    try:
        operands = ", ".join("%" + names[i] for i in m.ints(36))
    except KeyError as e:
        raise UnsupportedProto(f"{m.what}: operand id {e} is no instruction of its computation") from None
    if opcode == "parameter":
        head = f"parameter({m.int(9)})"
    elif opcode == "constant":
        literal = m.msg(8, m.what + " literal")
        head = f"constant({literal_text(literal) if literal is not None else '0'})"
    else:
        head = f"{opcode}({operands})"
    attrs: list[str] = []
    called = [computations.get(i) for i in m.ints(38)]
    if None in called:
        raise UnsupportedProto(f"{m.what}: calls a computation id the module does not hold")
    predicated = opcode == "conditional" and bool(m.ints(36)) and m.ints(36)[0] in pred_ids
    attrs += _called_attributes(m, "conditional-pred" if predicated else opcode, called)
    if opcode == "get-tuple-element" or m.has(13):
        attrs.append(f"index={m.int(13)}")
    if m.ints(14):
        dims = m.ints(14)
        attrs.append(f"iota_dimension={dims[0]}" if opcode == "iota" else
                     f"inferred_dimension={dims[0]}" if opcode == "reshape" else f"dimensions={_ints(dims)}")
    window = m.msg(15, m.what + " window")
    if window is not None and window.values:
        attrs.append("window=" + window_text(window))
    conv = m.msg(16, m.what + " convolution_dimension_numbers")
    if conv is not None:
        attrs.append("dim_labels=" + dim_labels_text(conv))
    if m.int(50, 1) != 1:
        attrs.append(f"feature_group_count={m.int(50)}")
    if m.int(58, 1) != 1:
        attrs.append(f"batch_group_count={m.int(58)}")
    slices = m.msgs(17, m.what)
    if slices:
        attrs.append("slice={" + ", ".join(f"[{s.int(1)}:{s.int(2)}:{s.int(3, 1)}]" for s in slices) + "}")
    if opcode == "reduce-precision":
        attrs.append(f"exponent_bits={m.int(18)}, mantissa_bits={m.int(19)}")
    if m.ints(20):
        if opcode.startswith("collective-permute"):
            raise UnsupportedProto(f"{m.what}: slice sizes of a combined collective-permute are not read without jax")
        attrs.append(f"dynamic_slice_sizes={_ints(m.ints(20))}")
    padding = m.msg(21, m.what + " padding_config")
    if padding is not None:
        dims = padding.msgs(1, m.what)
        attrs.append("padding=" + "x".join(
            f"{d.int(1)}_{d.int(2)}" + (f"_{d.int(3)}" if d.int(3) else "") for d in dims))
    if m.has(24) or opcode.startswith("batch-norm"):  # proto3 leaves a 0 out: XLA's parser wants both
        attrs.append(f"epsilon={(m.floats(24, 'f') or [0.0])[-1]!r}")
    if m.has(25) or opcode.startswith("batch-norm"):
        attrs.append(f"feature_index={m.int(25)}")
    if m.int(26) > 0:
        attrs.append(f"channel_id={m.int(26)}")
    if m.has(28):
        attrs.append(f"custom_call_target={_quote(m.str(28))}")
    dot = m.msg(30, m.what + " dot_dimension_numbers")
    if dot is not None:
        dot.check({1, 2, 3, 4})
        attrs += _dims_text(dot, (3, "lhs_batch_dims"), (1, "lhs_contracting_dims"), (4, "rhs_batch_dims"),
                            (2, "rhs_contracting_dims"))
    if opcode == "fft":
        attrs.append("fft_type=" + {0: "FFT", 1: "IFFT", 2: "RFFT", 3: "IRFFT"}.get(m.int(31), str(m.int(31))))
    if m.ints(32):
        attrs.append(f"fft_length={_ints(m.ints(32))}")
    outfeed = m.msg(29, m.what + " outfeed_shape")
    if outfeed is not None and outfeed.values:
        attrs.append("outfeed_shape=" + shape_text(outfeed))
    if m.bool(56) and opcode == "custom-call":
        constraints = m.msgs(57, m.what + " operand_shapes_with_layout")
        attrs.append("operand_layout_constraints={" + ", ".join(shape_text(c) for c in constraints) + "}")
    elif m.bool(56):  # collectives: the layout of the result is constrained
        attrs.append("constrain_layout=true")
    if m.has(80):
        attrs.append(f"cross_program_prefetch_index={m.int(80)}")
    aliasing = m.msgs(74, m.what + " output_operand_aliasing")
    if aliasing:
        for a in aliasing:
            a.check({1, 2, 3})
        attrs.append("output_to_operand_aliasing={" + ", ".join(
            f"{_ints(a.ints(1))}: ({a.int(2)}, {_ints(a.ints(3))})" for a in aliasing) + "}")
    gather = m.msg(33, m.what + " gather_dimension_numbers")
    if gather is not None:
        gather.check({1, 2, 3, 4, 5, 6})
        attrs += [f"offset_dims={_ints(gather.ints(1))}", f"collapsed_slice_dims={_ints(gather.ints(2))}",
                  f"start_index_map={_ints(gather.ints(3))}"]
        attrs += _dims_text(gather, (5, "operand_batching_dims"), (6, "start_indices_batching_dims"))
        attrs.append(f"index_vector_dim={gather.int(4)}")
    if m.ints(34) or opcode == "gather":
        attrs.append(f"slice_sizes={_ints(m.ints(34))}")
    scatter = m.msg(48, m.what + " scatter_dimension_numbers")
    if scatter is not None:
        scatter.check({1, 2, 3, 4, 5, 6})
        attrs += [f"update_window_dims={_ints(scatter.ints(1))}", f"inserted_window_dims={_ints(scatter.ints(2))}",
                  f"scatter_dims_to_operand_dims={_ints(scatter.ints(3))}"]
        attrs += _dims_text(scatter, (5, "input_batching_dims"), (6, "scatter_indices_batching_dims"))
        attrs.append(f"index_vector_dim={scatter.int(4)}")
    devices = m.msg(87, m.what + " collective_device_list")
    if devices is not None:
        attrs.append("replica_groups=" + device_list_text(devices))
    elif m.has(49) or opcode in ("all-reduce", "all-gather", "all-to-all", "reduce-scatter", "all-reduce-start",
                                  "all-gather-start"):
        attrs.append("replica_groups=" + replica_groups_text(m.msgs(49, m.what)))
    if m.bool(71):
        attrs.append("use_global_device_ids=true")
    pairs = m.msgs(52, m.what)
    if pairs or opcode in ("collective-permute", "collective-permute-start"):
        attrs.append("source_target_pairs={" + ",".join(f"{{{p.int(1)},{p.int(2)}}}" for p in pairs) + "}")
    if m.bool(47):
        attrs.append("is_host_transfer=true")
    if m.bool(60):
        attrs.append("is_stable=true")
    if m.has(63):
        attrs.append(f"direction={m.str(63)}")
    if m.has(72):
        attrs.append(f"type={m.str(72)}")
    if m.bool(67):
        attrs.append("indices_are_sorted=true")
    if m.bool(69):
        attrs.append("unique_indices=true")
    if opcode == "rng-bit-generator":
        attrs.append("algorithm=" + {0: "rng_default", 1: "rng_three_fry", 2: "rng_philox"}.get(m.int(70), "?"))
    if opcode == "rng":
        attrs.append("distribution=" + {1: "rng_uniform", 2: "rng_normal"}.get(m.int(23), "?"))
    if m.ints(37):
        try:
            attrs.append("control-predecessors={" + ", ".join("%" + names[i] for i in m.ints(37)) + "}")
        except KeyError as e:
            raise UnsupportedProto(f"{m.what}: control predecessor {e} is no instruction of its computation") from None
    replication = m.msg(61, m.what + " parameter_replication")
    if replication is not None and replication.values:
        replication.check({1})
        attrs.append("parameter_replication={" + ",".join("true" if b else "false" for b in replication.ints(1)) + "}")
    solve = m.msg(59, m.what + " triangular_solve_options")
    if solve is not None:
        solve.check({1, 2, 3, 4})
        attrs += [f"{key}={'true' if solve.bool(n) else 'false'}" for n, key in
                  ((1, "left_side"), (2, "lower"), (3, "unit_diagonal"))]
        transpose = {1: "NO_TRANSPOSE", 2: "TRANSPOSE", 3: "ADJOINT"}.get(solve.int(4), "NO_TRANSPOSE")
        attrs.append(f"transpose_a={transpose}")
    cholesky = m.msg(62, m.what + " cholesky_options")
    if cholesky is not None:
        cholesky.check({1})
        attrs.append(f"lower={'true' if cholesky.bool(1) else 'false'}")
    if m.has(81):
        attrs.append(f"k={m.int(81)}")
    if m.has(85):
        attrs.append(f"largest={'true' if m.bool(85) else 'false'}")
    if m.has(66):
        attrs.append(f"delta={m.int(66)}")
    if m.bool(65):
        attrs.append("custom_call_has_side_effect=true")
    if m.int(77) not in (0, 1) and opcode == "custom-call":
        attrs.append(f"api_version={API_VERSIONS.get(m.int(77), m.int(77))}")
    if m.bool(89):
        attrs.append("is_composite=true")
    precision = m.msg(51, m.what + " precision_config")
    if precision is not None:
        precision.check({1, 2})
        levels = precision.ints(1)
        if any(levels):
            attrs.append("operand_precision={" + ",".join(PRECISIONS.get(p, "default") for p in levels) + "}")
        if precision.int(2):
            raise UnsupportedProto(f"{m.what}: precision_config.algorithm is not read without jax")
    sharding = m.msg(40, m.what + " sharding")
    if sharding is not None:
        attrs.append("sharding=" + sharding_text(sharding))
    frontend = m.msg(68, m.what + " frontend_attributes")
    if frontend is not None and frontend.values:
        attrs.append("frontend_attributes=" + frontend_attributes_text(frontend))
    metadata = m.msg(7, m.what + " metadata")
    if metadata is not None and metadata.values:
        attrs.append("metadata=" + metadata_text(metadata))
    if m.bytes(43):
        attrs.append("backend_config=" + _quote(m.bytes(43).decode("utf-8", "replace")))
    text = f"{'ROOT ' if is_root else ''}%{name} = {shape_text(shape)} {head}"
    return text + "".join(", " + a for a in attrs)


def _called_attributes(m: Message, opcode: str, called: list[str | None]) -> list[str]:
    if not called:
        return []
    names = ["%" + c for c in called if c]
    if opcode == "fusion":
        return [f"kind={m.str(11) or 'kLoop'}", f"calls={names[0]}"]
    if opcode == "while":
        return [f"condition={names[1]}", f"body={names[0]}"]  # called_computations: body, then condition
    if opcode == "conditional-pred":  # a PRED index: XLA's parser takes only this form
        return [f"true_computation={names[0]}", f"false_computation={names[1]}"]
    if opcode == "conditional":
        return ["branch_computations={" + ", ".join(names) + "}"]
    if opcode in TO_APPLY:
        return [f"to_apply={names[0]}"]
    if opcode == "select-and-scatter":
        return [f"select={names[0]}", f"scatter={names[1]}"]
    if opcode in ("async-start", "async-update", "async-done"):
        return [f"calls={names[0]}"]
    if opcode == "custom-call":
        return ["called_computations={" + ", ".join(names) + "}"]
    raise UnsupportedProto(f"{m.what}: calling computations from {opcode} is not read without jax")


# ---- computations and the module ----------------------------------------------------------
def computation_text(m: Message, computations: dict[int, str], is_entry: bool) -> str:
    name = m.str(1)
    m.what = f"computation {name!r}"
    m.check({1, 2, 4, 5, 6, 7, 8}, {2: "instructions"})
    instructions = m.msgs(2, m.what)
    names = {i.int(35): i.str(1) for i in instructions}
    pred_ids = frozenset(i.int(35) for i in instructions if (i.msg(3, "") or Message(None, "")).int(2) == 1)
    root = m.int(6)
    lines = [f"{'ENTRY ' if is_entry else ''}%{name} {{"]
    for inst in instructions:
        lines.append("  " + instruction_text(inst, names, computations, inst.int(35) == root, pred_ids))
    thread = m.str(8)
    lines.append("}" + (f", execution_thread={_quote(thread)}" if thread and thread != "main" else ""))
    return "\n".join(lines)


def _program_shape_text(m: Message) -> str:
    m.check({1, 2, 3})
    params = ", ".join(shape_text(p) for p in m.msgs(1, m.what))
    result = m.msg(2, m.what)
    return "{(" + params + ")->" + (shape_text(result) if result is not None else "()") + "}"


def _stack_frame_tables(m: Message) -> list[str]:
    m.check({1, 2, 3, 4})
    out: list[str] = []
    if m.strs(1):
        out += ["FileNames"] + [f"{i} {_quote(s)}" for i, s in enumerate(m.strs(1), 1)] + [""]
    if m.strs(2):
        out += ["FunctionNames"] + [f"{i} {_quote(s)}" for i, s in enumerate(m.strs(2), 1)] + [""]
    locations = m.msgs(3, m.what)
    if locations:
        out.append("FileLocations")
        for i, loc in enumerate(locations, 1):
            keys = ((1, "file_name_id"), (2, "function_name_id"), (3, "line"), (5, "end_line"), (4, "column"),
                    (6, "end_column"))
            out.append(f"{i} {{" + " ".join(f"{k}={loc.int(n)}" for n, k in keys if loc.has(n)) + "}")
        out.append("")
    frames = m.msgs(4, m.what)
    if frames:
        out.append("StackFrames")
        # The text numbers a frame's parent one more than the proto does (the proto's 0, no parent, is 1).
        out += [f"{i} {{file_location_id={f.int(1)} parent_frame_id={f.int(2) + 1}}}" for i, f in enumerate(frames, 1)]
        out.append("")
    return out


def module_text(data: bytes | memoryview) -> str:
    """HLO text of a serialized HloModuleProto. Raises UnsupportedProto or WireError."""
    m = Message(data, "HloModuleProto")
    m.check({1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19},
            {9: "dynamic_parameter_binding"})
    computations = m.msgs(3, "computation")
    by_id = {c.int(5): c.str(1) for c in computations}
    entry_id = m.int(6) if m.has(6) else None
    entry_name = m.str(2)
    header = f"HloModule {m.str(1) or 'module'}"
    if m.has(7):
        header += ", is_scheduled=true"
    alias = m.msg(8, "input_output_alias")
    if alias is not None and alias.values:
        kinds = {1: ", may-alias", 2: ", must-alias"}
        entries = []
        for e in alias.msgs(1, "input_output_alias entry"):
            e.check({1, 2, 3, 4})
            entries.append(f"{_ints(e.ints(1))}: ({e.int(2)}, {_ints(e.ints(3))}{kinds.get(e.int(4), '')})")
        header += ", input_output_alias={ " + ", ".join(entries) + " }"
    donors = m.msg(18, "buffer_donor")
    if donors is not None and donors.values:
        header += ", buffer_donor={ " + ", ".join(
            f"({d.int(1)}, {_ints(d.ints(2))})" for d in donors.msgs(1, "buffer_donor entry")) + " }"
    shape = m.msg(4, "host_program_shape")
    if shape is not None and shape.values:
        header += ", entry_computation_layout=" + _program_shape_text(shape)
    frontend = m.msg(19, "frontend_attributes")
    if frontend is not None and frontend.values:
        header += ", frontend_attributes=" + frontend_attributes_text(frontend)
    lines = [header, ""]
    frames = m.msg(17, "stack_frame_index")
    if frames is not None and frames.values:
        lines += _stack_frame_tables(frames)
    for c in computations:
        is_entry = c.int(5) == entry_id if entry_id is not None else c.str(1) == entry_name
        lines += [computation_text(c, by_id, is_entry), ""]
    return "\n".join(lines)


__all__ = ["UnsupportedProto", "WireError", "module_text"]
