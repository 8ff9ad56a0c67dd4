"""The attribute names XLA's parser allows on each opcode (`hlo_parser.cc` declares them per
opcode and rejects any other: `unexpected attribute "X". Allowed attributes: ...`).

The table was read off XLA itself (jaxlib 0.10.2): every opcode of the corpus given once with an
unknown attribute, and the list its error names kept. Opcodes missing here (rarer ones, and the
async `<op>-start` shorthand of ops the corpus does not wrap) are held to the union of all names,
which still catches a misspelt name. NEWER holds names that modules of a newer XLA carry and
jaxlib 0.10.2 does not know yet: those are read, as the rest of a newer XLA's text is.
"""

from __future__ import annotations

from typing import Iterable

# Every opcode takes these.
COMMON = frozenset({"backend_config", "control-predecessors", "frontend_attributes", "metadata", "origin",
                    "parameter_replication", "sharding", "statistics"})
# Seen in corpus modules of a newer XLA (they parse here; jaxlib 0.10.2 rejects the name).
NEWER: dict[str, frozenset[str]] = {"topk": frozenset({"is_stable"})}

# (opcodes, the names each allows beyond COMMON)
_TABLE = [
    ('abs add add-dependency after-all all-gather-done all-reduce-done and atan2 bitcast '
     'bitcast-convert ceil clamp collective-permute-done complex constant convert copy copy-done '
     'divide dynamic-reshape dynamic-update-slice floor imag is-finite maximum minimum mulhi multiply '
     'negate not opt-barrier or parameter partition-id power real remainder replica-id '
     'round-nearest-even select shift-left shift-right-arithmetic shift-right-logical sign '
     'stochastic-convert subtract tuple xor',
     ''),
    ('abs-done add-done all-to-all-done call-done call-update custom-call-done custom-call-update '
     'dot-done fusion-done fusion-update reduce-scatter-done slice-done',
     'async_execution_thread'),
    ('abs-start',
     'async_execution_thread output_to_operand_aliasing'),
    ('all-gather all-gather-start',
     'channel_id constrain_layout dimensions replica_groups use_global_device_ids'),
    ('all-reduce all-reduce-start',
     'channel_id constrain_layout mode replica_groups to_apply use_global_device_ids'),
    ('all-to-all',
     'channel_id constrain_layout dimensions replica_groups'),
    ('all-to-all-start',
     'async_execution_thread channel_id constrain_layout dimensions output_to_operand_aliasing '
     'replica_groups'),
    ('asin atanh cbrt cosine erf exponential exponential-minus-one log log-plus-one logistic rsqrt '
     'sine sinh sqrt tan tanh',
     'result_accuracy'),
    ('async-done async-update',
     'async_execution_thread calls'),
    ('async-start',
     'async_execution_thread calls output_to_operand_aliasing'),
    ('batch-norm-grad batch-norm-inference batch-norm-training',
     'epsilon feature_index'),
    ('broadcast concatenate get-dimension-size reverse set-dimension-size transpose',
     'dimensions'),
    ('call',
     'is_composite to_apply'),
    ('call-start',
     'async_execution_thread is_composite output_to_operand_aliasing to_apply'),
    ('cholesky',
     'lower'),
    ('collective-broadcast',
     'channel_id replica_groups'),
    ('collective-permute collective-permute-start',
     'channel_id slice_sizes source_target_pairs'),
    ('compare',
     'direction type'),
    ('conditional',
     'branch_computations false_computation true_computation'),
    ('convolution',
     'batch_group_count convolution_kind dim_labels feature_group_count operand_precision '
     'sparsity_config window'),
    ('copy-start',
     'cross_program_prefetch_index'),
    ('custom-call',
     'api_version batch_group_count called_computations custom_call_has_side_effect '
     'custom_call_target dim_labels feature_group_count literal operand_layout_constraints '
     'operand_precision output_to_operand_aliasing padding_type schedule to_apply window'),
    ('custom-call-start',
     'api_version async_execution_thread batch_group_count called_computations '
     'custom_call_has_side_effect custom_call_target dim_labels feature_group_count literal '
     'operand_layout_constraints operand_precision output_to_operand_aliasing padding_type schedule '
     'to_apply window'),
    ('domain',
     'domain'),
    ('dot scaled-dot',
     'algorithm lhs_batch_dims lhs_contracting_dims operand_precision rhs_batch_dims '
     'rhs_contracting_dims'),
    ('dynamic-slice',
     'dynamic_slice_sizes'),
    ('fft',
     'fft_length fft_type'),
    ('fusion',
     'calls kind output_to_operand_aliasing'),
    ('gather',
     'collapsed_slice_dims index_vector_dim indices_are_sorted offset_dims operand_batching_dims '
     'slice_sizes start_index_map start_indices_batching_dims'),
    ('get-tuple-element',
     'index'),
    ('infeed',
     'infeed_config'),
    ('iota',
     'iota_dimension'),
    ('map reduce',
     'dimensions to_apply'),
    ('outfeed',
     'outfeed_config outfeed_shape'),
    ('pad',
     'padding'),
    ('ragged-all-to-all',
     'channel_id dimensions replica_groups'),
    ('ragged-dot',
     'lhs_batch_dims lhs_contracting_dims lhs_ragged_dims operand_precision rhs_batch_dims '
     'rhs_contracting_dims rhs_group_dims'),
    ('recv recv-done send send-done',
     'channel_id is_host_transfer'),
    ('reduce-precision',
     'exponent_bits mantissa_bits'),
    ('reduce-scatter',
     'channel_id constrain_layout dimensions mode replica_groups to_apply use_global_device_ids'),
    ('reduce-scatter-start',
     'async_execution_thread channel_id constrain_layout dimensions mode output_to_operand_aliasing '
     'replica_groups to_apply use_global_device_ids'),
    ('reduce-window',
     'to_apply window'),
    ('reshape',
     'inferred_dimension'),
    ('rng',
     'distribution'),
    ('rng-bit-generator',
     'algorithm'),
    ('rng-get-and-update-state',
     'delta'),
    ('scan',
     'dimensions is_associative is_reverse num_carries to_apply'),
    ('scatter',
     'index_vector_dim indices_are_sorted input_batching_dims inserted_window_dims '
     'scatter_dims_to_operand_dims scatter_indices_batching_dims to_apply unique_indices '
     'update_window_dims'),
    ('select-and-scatter',
     'scatter select window'),
    ('slice',
     'slice'),
    ('slice-start',
     'async_execution_thread output_to_operand_aliasing slice'),
    ('sort',
     'dimensions is_stable to_apply'),
    ('topk',
     'k largest'),
    ('triangular-solve',
     'left_side lower transpose_a unit_diagonal'),
    ('while',
     'body condition'),
]

ALLOWED: dict[str, frozenset[str]] = {
    op: COMMON | NEWER.get(op, frozenset()) | frozenset(names.split()) for ops, names in _TABLE for op in ops.split()
}
ANY_OPCODE = frozenset().union(*ALLOWED.values())  # for an opcode not in the table


def unknown_attribute(opcode: str, names: Iterable[str]) -> str | None:
    """The first of `names` that XLA's parser would reject on `opcode`, or None."""
    allowed = ALLOWED.get(opcode, ANY_OPCODE)
    for name in names:
        if name not in allowed:
            return name
    return None
