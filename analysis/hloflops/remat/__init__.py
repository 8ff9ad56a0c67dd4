"""Rematerialization (recomputation) and the forward / backward / other phase of each op.

Remat FLOPs are the FLOPs that execute because of remat: what the program runs beyond the same
program compiled without remat. Two kinds of recomputation show up in HLO:

* jax's `checkpoint` / flax's `remat`: the backward pass recomputes the forward inside a
  `rematted_computation` name scope (before optimization, jax also puts an
  `optimization-barrier` on the recompute's inputs so that CSE keeps it apart); older jax
  (0.4.13 to 0.4.20 at least) names the whole transpose of the checkpoint, recompute and
  backward ops alike, with one `remat` frame (hloflops.remat.names: how it is told from a
  user's module named `remat`);
* XLA's HloRematerialization pass: it clones an instruction as `<name>.remat` (`.remat2`, ...)
  and keeps the original.

A name is only a hint: XLA's CSE can merge a forward op with its recompute (nothing then runs
twice, but the one op left may carry the remat name: "phantom remat"), and XLA's
simplifications can hand a remat name to a backward op that recomputes nothing. So an op is
remat only when it is remat-marked (remat name or older jax's frame, `.remat` clone, or computed
from an optimization barrier's output) and the program also computes the same value elsewhere, both
copies executing (hloflops.remat.values numbers values by what they compute from which inputs:
ENTRY parameters by number, loop state by loop and index, not by shape; unit dimensions aside: a
view that only adds or drops them is its operand, and an elementwise op, a broadcast or a reduce
counts its shape without them, as XLA holds one value as `[b, t, 1]` or `[1, b, t, d]` in one
place and without the unit dimension in another, hloflops.remat.views):

1. Same value, same inputs (equal exact value number): typically the forward and its recompute
   in one computation (the entry of a loop-free program, one loop body). A value the forward
   computes k times is recomputed at most k times under one checkpoint's name: further marked
   copies are the linearization's own (jvp's `x * x` for the derivative of `x ** 3`), model
   FLOPs. After optimization (not TPU's), a value the forward computes once and stores (a fusion's output in
   place, or unfused) is stored by the program without remat too, which reads it there, its
   gradient fusions included: every recompute copy is remat, and so is a copy of a value the
   forward computes once inside that fusion where it feeds only copies of the stored value (a
   bias add under the residual sum; hloflops.remat.stored_forwards), also where the recompute's
   copies hold the stored value with a unit dimension more or less (a layer norm's `[b, t, 1]`
   rsqrt, and all computed from it: one value number, unit dimensions aside). If every op of the value
   is marked, either the forward computes it elsewhere under another number (ops of its
   signature and name reading the same inputs, whose value no recompute of the class's depth
   matched exactly: as many copies are recompute; classes that
   find the same forward values share them, one value each: layer norm's mean and mean square;
   across loop bodies an elementwise op's twins are first those that multiply by the very
   constants it does, unit dimensions aside: one attention head's scores `s * (1 / sqrt(d))`,
   `[b, 1, q, k]` in the recompute and `[b, q, k]` in the forward, are not the probabilities
   `e * broadcast(1 / sum)` of the recompute's shape and name)
   or CSE merged the forward away and one of them is model FLOPs.
   A callee that several `call` sites run (before optimization an unrolled scan's step, or a
   checkpointed block lowered once for every layer) is numbered at each site and named there
   by that site's calls (one `jit(relu)` for a nested remat's outer and inner recomputes: each
   site its own checkpoint's name), and its ops pair per site: an instruction is remat where
   it is recomputation at every site.
2. A recompute inside a loop body whose forward runs in another loop's body (a scan's backward
   loop against its forward loop) reads its inputs from a different loop state, so its value
   is matched by computation instead: an op in another frame applying the same computation to
   inputs of the same shapes (equal abstract value number; a policy's saved residual, an
   identity rounding in the forward, counts as an input there: the recompute reads it back from
   the saved stack) whose op_name ends the way the recompute's name ends inside its checkpoint
   (`Dense_0/dot_general`). Before optimization such structural twins pair first: jvp's own
   coefficients named in the recompute (silu's `s * (1 - s)`) match only by signature and take
   what is left. A callee called at several sites (an unrolled gradient accumulation's
   microbatches) computes a forward value once per site, and its copies count per site; a remat-named op whose
   value matched nothing exactly may pair the same way with an op of its signature, never the
   backward's own work, and in its own frame only after optimization and only with an op that
   reads the same inputs (hloflops.remat.inputs: never another layer's op); of the twins in
   sight, the one of the shortest name first (a residual `add` is not `linear/add`), and a
   recompute a fusion hands out before a marked copy in a gradient fusion (rule 4 decides that
   copy: the program without remat has it too). A twin serves one recompute per level (remat
   depth, checkpoints around the recompute: nested remat recomputes a layer at two levels), also
   where another level's recompute matched its value exactly (rule 1) and this one's was
   numbered apart (hloflops.remat.by_signature). A cheap recompute left without a twin of its
   signature then takes one equal but for unit dimensions (those scores again).
   A cast takes one only where nothing but the recompute reads it
   (hloflops.remat.recompute_only_casts). Sharded,
   the partitioner may split a recompute's matmul another way than its forward (a shard of the
   features contracted and all-reduced, against the weight gathered): other local shapes, the
   same FLOPs on each device. It then pairs, in its own frame, with a matmul of its opcode,
   name and per-device FLOPs reading the same known inputs; and a reduce summing a shard of the
   dimension its forward sums whole (its partial sums all-reduced) with that forward reduce of
   its name, result and kept extents (hloflops.remat.partitioned). The partitioner may also
   compute one copy as a windowed einsum, a window of the sharded operand per trip of a `while`
   named by the matmul (or per matmul, the windows unrolled) while the other runs whole: an
   unpaired recompute in another frame then pairs with those windows together, of its name and of
   the whole matmul's FLOPs (TPU; hloflops.remat.windowed_matmuls); in its own frame only with the
   windows reading its very weight, one layer's slice (hloflops.remat.windowed_forward_recomputes).
   And a recompute's matmul
   computed from a residual the program offloaded to the host reads what no forward op reads, so
   CSE merged nothing into it: it pairs with a forward twin of its signature and name left over,
   inputs aside (TPU; hloflops.remat.host_read_recomputes). A
   forward's name may carry the module's name inside `jvp(...)`, brackets and all (equinox's
   `jvp(vmap(eqx.nn.Linear))/dot_general` ends as its recompute's `vmap(eqx.nn.Linear)/dot_general`).
   A remat-named op the forward computes nothing like (no op outside the backward
   of its opcode, result and name: softmax's `s * s`), and what the recompute computes from it
   (`1 / (s * s)`, the derivative of `1 / s`), is the linearization's own work jax named in the
   recompute, and pairs with no twin (it took the forward's `1 / s` where CSE merged that
   recompute away, or the twin of the real recompute of `1 / s`).
3. An XLA `.remat` clone pairs with its original (the same name without the suffix).
4. Fusion copies (after optimization): XLA copies a cheap elementwise op into every fusion that
   consumes it, with remat as without, so a marked copy inside a fusion is recompute exactly
   where that fusion's output is recompute, and is not where the fusion's outputs are unmarked
   or the model's own computation of their value (a gradient fusion: the program without remat
   has it too, also where the forward's own copy is in sight; but a backward loop body's, where
   that program reads stored residuals and copies no forward op: unsure; but there a copy of a
   coefficient of the linearization that no forward op computes, tanh's `1 - t`, is recompute
   beyond its one model copy: that program computes it once in its forward, saving it; so is a
   value computed from such a coefficient, sigmoid's `s * (1 - s)`, whatever forward op of its
   signature and name it was counted against). Nor is a copy in a fusion of the linearization's
   own work named in the recompute (rule 2's `1 / (s * s)`): the program without remat has that
   fusion, reading its forward's `s`, widen and all; also where it was counted by value (a layer
   norm's `var + eps` in rsqrt's coefficient's fusion), its count passing to a sibling copy.
   A forward op XLA copied into a fusion that computes a recompute (an embedding lookup)
   runs there only because of remat, and so does one an expensive recompute reads in its fusion
   where the expensive op's forward twin reads a copy of the same value in its own (a layer norm's
   variance chain under the recompute's rsqrt; not above a policy's saved residual, and no more
   copies than the forward's fusions hold, a fusion handing out a forward value widened by an
   unnamed convert among them: a layer norm's output for a matmul, which copies the mean). An
   unpaired marked expensive op of one operand pairs with the unmarked op of its opcode reading
   the same value through unit-dimension views (the recompute's rsqrt over a `[b, t, 1]` bitcast
   of the forward's `[b, t]` variance; hloflops.remat.expensive_chains). The fusion's outputs
   and unfused ops keep the answer of rules 1-3, and so do marked copies counted against the
   forward's copies (rule 1's cap), except where no fusion of the forward twins of the fusion's
   outputs computes the copied value (the forward reads it stored: a nested remat's outer
   recompute of one block's output inside the next one's). A forward op copied into a recompute
   whose forward runs inside a library fusion (CPU's `__ynn_fusion`: it reads that op stored,
   where the program without remat copies it into a loop fusion) is model FLOPs, unsure, but
   for a residual the policy saves (the program with remat stores it: that is the extra copy).
   A recompute TPU nested inside the fusion of a backward matmul is model FLOPs where the forward
   computes its value only nested in its own matmuls' fusions (the program without remat builds
   it there too), the ops under the chain's transcendental as well (TPU nests gelu, tanh and
   all). So is the whole chain of such a nested fusion whose outputs the forward computes only
   nested, no op of it one the forward hands out, in a program without loops: the program without
   remat rebuilds the value there from what it stores (softmax's `p` in the fusion of
   `dv = p^T @ do`; hloflops.remat.rebuilt_in_gradient_matmuls). A recomputed activation chain the
   forward runs only inside its matmul's output fusion, handing out the activation alone, is loose:
   the program without remat may save the matmul's output and rebuild the chain in its backward
   fusions, or save the chain (hloflops.remat.rebuilt_activation_chains). But a bias add of a matmul output
   the policy saves (through an identity rounding, or an offload policy's round trip through the
   host) is recompute in every fusion that copies it:
   without remat XLA fuses it into the matmul's output fusion and stores the sum, which the backward
   reads. Through that round trip no recompute has a forward op's exact value, nor where it reads
   its matmul's output in another precision (an f32 product against the forward's bf16 one
   widened): a nested one is model FLOPs where every forward op of its opcode, shape, frame and name
   inside the checkpoint is nested too, but a bias add of a matmul's output or saved residual
   (hloflops.remat.offloaded_residuals). TPU computes a bf16 transcendental in f32 between a widen
   and a narrow: where a recompute's leaves its fusion narrowed, both converts are its own and take
   its answer (not in a scan's backward loop; hloflops.remat.type_corrections). In a scan's backward
   loop the program without remat saves tanh's `1 - t` narrowed, widening the bf16 constant: two
   converts that offset two counted ones of the recompute's wrappers per such residual its gradient
   fusion computes (hloflops.remat.saved_residual_narrows). A top-level `-inf` pad/maximum
   concatenation whose pieces a recompute concatenates again (an LSTM's gate kernel) may be built
   in place by the program without remat: unsure (hloflops.remat.rebuilt_concatenations). XLA's fusion pass
   never duplicates an expensive op, so a marked one in a fusion is a recompute of its own, with the cheap chain under
   it; but a transcendental the recompute computes in several fusions under one name (TPU copies
   gelu's tanh into the weight's and the input's gradient fusions), the forward's like op in the
   same frame (unit dimensions aside where the forward copies its value into several fusions too:
   softmax's `exp` with one head's dimension kept), is a copy like any cheap op, and so is its
   chain: model FLOPs in a gradient fusion (one whose unnamed bf16 convert output is named by what
   it converts), unsure. The forward's cap
   on such a value's counted copies says how many, not which: where the copy it picked is the
   gradient fusion's, so dropped, a sibling copy in a fusion whose output is recompute takes the
   count (hloflops.remat.fusion_copies, `_counts_passed_on`). On TPU, a cheap
   forward value the forward never stores (copied into each fusion reading it) while the
   recompute's copy is stored (a backward reader reads it whole) is stored once by the forward
   without remat, which its backward reads: the forward's copies beyond one, with the cheap chain
   only they need in their fusions, are recompute (in the range only); not for a value of
   parameters and constants alone, which any backward builds where it reads it
   (hloflops.remat.unstored_forward).
   A value the recompute computes in one fusion and stores for the backward, where the forward
   splits its chain (a fusion handing out only chain values, the embedding's gather, to fusions
   copying the rest into each reader: the index clamp and out-of-range mask of `jnp.take`) is
   one the program without remat computes and stores as the recompute does, its backward reading
   the forward's: the recompute's chain is model FLOPs and the forward's copies are remat, and so
   is another recompute fusion storing a value of that chain the forward never hands out (the
   clamped indices for the embedding gradient's scatter). Not for a chain holding an expensive op
   or a saved residual (hloflops.remat.stored_by_the_recompute). The chain may read another
   recompute fusion's value that the forward hands out too (a bias cast).
   A paired cheap recompute in a gradient fusion that reads a recomputed matmul of that fusion (or
   the collective completing one, at its parameter) is no copy the program without remat makes:
   XLA never duplicates a matmul, and where the forward computes the op in its matmul's fusion (a
   whole model's head bias add) the program without remat stores it there, or fuses its cotangent
   there, and its gradient fusions copy none: recompute, in the range
   (hloflops.remat.recompute_epilogues). But where such a fusion also hands the recomputed matmul's
   output out (`h = x @ w + b`, for the weight's gradient; forward and backward in one computation),
   the program without remat stores `h` and builds the same gradient fusion reading it, copying the
   cheap chain of `h` (gelu's) into it: that fusion's ops outside what `h` is computed from, and the
   cheap values of them it hands to the rest of the gradient, are model FLOPs; a count by value
   they held passes to a sibling in a top-level recompute fusion
   (hloflops.remat.mixed_gradient_fusions). The backward's own ops that fusion computes from the
   recompute (the loss's cotangent `y * c`), handed out narrowed to gradient matmuls only, the
   program without remat computes in its forward's matmul fusion and again, wide, in each of those
   matmuls' fusions: the narrow is recompute, and the copies it makes beyond this program's one
   offset counted recomputes of their opcode (TPU; hloflops.remat.stored_cotangents). Where the
   forward stores nothing of a layer's first matmul, TPU nests it with its activation in the next
   matmul's fusion and narrows the activation there: where the activation reads a value twice
   (gelu's `x * f(x)`, whose derivative reads `x`), the program without remat stores that value
   for its backward and its next matmul's fusion reads it wide, so the narrow is recompute, in the
   range (hloflops.remat.nested_forward_narrows). The input TPU packs for a 3x3 convolution's
   backward (shifted slices padded with `-inf`, combined by `maximum` between a widen and a narrow)
   counts with the convolution reading it (nested in its fusion, or through a second packing), not
   by the recompute's name it carries: the program without remat packs the same operand for that
   convolution wherever it computes the activation; a piece's zero-halo mask (`select` on an `iota`
   comparison) in a forward or two-level packing is unsure, since the program without remat may
   pad that piece once, unfused, for both packings; not in loop bodies, whose convolutions' flags
   rest on per-trip pairing (hloflops.remat.packed_conv_inputs). The narrow a convolution's operand
   takes inside the convolution's fusion (a weight gradient's nested relu) is remat as the op it
   narrows: the program without remat narrows there too (hloflops.remat.conv_operand_narrows).
   The forward's narrow of a chain of single reads (`tanh(x @ w + b)`) nested with its matmul in
   the next matmul's fusion, outside loop bodies, whose recompute the backward reads wide (tanh's
   derivative reads `t`): the program without remat stores `t` in f32 and its next matmul reads it
   with no convert, so that narrow is recompute too, in the range
   (hloflops.remat.activation_output_narrows).
   A recomputed relu mask TPU packs into bits (`shift-left` by an `iota`, a `reduce` by `or`) in a
   scan's backward loop body, and its unpacks in the gradient fusions, are remat: the program
   without remat stacks the mask as `pred` from its forward loop and packs nothing; outside a loop
   both programs pack the mask they hand to the backward (hloflops.remat.packed_masks).
   A remat-named op the forward computes only on a packed convolution's output layout
   (`[H, f, w+1, C]` against the recompute's `[N, H, W, C]`, f w = N W: relu recomputed from a
   saved pre-activation) is a stand-in, in the range, not the linearization's own work: the program
   without remat may read relu's output stored or copy relu into its gradient fusion
   (hloflops.remat.packed_layout_recomputes). A recompute's packing of loop-invariant loop state (an
   LSTM's concatenated weights) in a backward loop body, one per matmul reading it, is remat: the
   program without remat hoists it out of its loops (hloflops.remat.loop_invariant_packings).
   Float normalization's unnamed widens in a scan's backward loop recompute fusions are in the
   range only: the program without remat copies such widens into the forward fusions stacking
   the residual chains (hloflops.remat.saved_chain_widens). A recomputed pre-activation `z` its
   matmul fusion hands out narrowed and the weight gradient widens back: the program without remat
   makes that round trip in its forward and widens once more, so both converts are unsure and one
   more widen lowers the low end (hloflops.remat.stored_preactivations). The unnamed narrow of a
   type-corrected cheap op a TPU rule took out of remat, reading an offloaded residual, follows the
   op (hloflops.remat.corrected_narrows); relu copies of a matmul output a loop stores wide (or
   offloads) lower the low end by the twin's narrow of `h` and its widen and narrow per copy
   (hloflops.remat.offloaded_sum_narrows); an activation straight off a matmul output a scan
   offloads to a host stack, by the narrow the twin hands its next matmul from the fusion stacking
   it (hloflops.remat.host_stacked_activations). Where jax differentiates inside a function the
   program calls (an unrolled gradient accumulation's per-microbatch gradient) and no loop runs,
   TPU's program without remat computes a layer norm's `rsqrt(var + eps)` twice in its forward:
   unit-free for its matmul fusions, and in jax's `[b, t, 1]` shape as the residual the input
   gradient reads. A recompute fusion computing that statistic once, read (through a broadcast)
   both by recomputed ops and by an op of the transpose's own, stands for that second copy: model
   FLOPs; where CSE merged the recompute into the forward, that copy is the twin's alone and lowers
   the range's low end (hloflops.remat.twin_residual_copies). Without a loop, TPU may fuse the
   recompute of such a statistic with the cotangent's product with its coefficient (`-0.5 * r / v`,
   a marked divide of `r`), handing out both: the program without remat computes `r` in its
   forward, before any cotangent, and that product in a gradient fusion of its own into which it
   copies the chain of `r`, so the fused recompute stands for that gradient fusion: model FLOPs
   (hloflops.remat.coefficient_fusions).
   A scan's gradient fusion reading a bf16 program's residuals recomputed wide lowers the low end
   by the program without remat's narrow into its stack and widen back, two converts per residual
   (hloflops.remat.wide_residual_trips).
   A forward matmul reading relu wide behind a policy's saved-residual rounding, whose recompute
   copy TPU narrows for the weight gradient, makes that narrow weak and lowers the low end by the
   narrow the program without remat may make of its forward copy (hloflops.remat.rounded_operand_narrows).
   A layer's `h = x @ w + b` the recompute's matmul fusion stores narrowed while the forward
   nests matmul, add and activation unstored in the next matmul's fusion: the program without
   remat stores `h` as the recompute does, and its readers widen it as the backward's do, so the
   converts around it but one widen of the matmul's output are its own, unsure
   (hloflops.remat.stored_matmul_outputs).
5. Saved copies (after optimization, loop forms): a backward loop's fusion of cheap recomputes
   that a weight's gradient reads as it is stands in for the copy the program without remat
   makes of those ops in the fusion saving the value into its stack: model FLOPs
   (hloflops.remat.saved_copies), whatever the fusion reads where it hands the value out
   reshaped (`[batch * tokens, width]`: the forward's matmul reads it reshaped too, so XLA
   copies the chain into every reader, gelu's product over its tanh's fusion as well). So, in
   any frame, is such a fusion that hands its cheap
   recomputes out only through a transpose of XLA's (no op_name) for a backward matmul: the
   program without remat relays out its forward's value for that matmul in a fusion of its
   own, copying the same cheap ops (a conv net's `relu(conv + b)` for a kernel's gradient).
   Only the ops XLA copies there: those reading at most one full-size value, from the transpose
   down to the first that reads two (a residual sum, which the program without remat stores
   once and relays out stored: its recompute's relayout is recompute). XLA copies such a chain
   into a saving fusion too where it reads another fusion's result (softmax's `e * (1 / s)`):
   a recompute of it a backward matmul reads stands in for that copy, where no recomputed matmul
   reads it; an unnamed matmul (a CPU library fusion) is the backward's unless the pairing counted it.
   A recomputed cheap value on the chain of residuals the program without remat saves (in a
   backward loop's gradient fusion, what an op outside the recompute reads: gelu's `x`,
   `3 * x * x`, `0.5 * (1 + t)`) is copied there into one saving fusion per such residual, where
   the program with remat computes it once in its gradient fusion; its recompute fusions split
   where that program's forward does (both materialize what the gradient reads). So as many of
   the recompute's copies run because of remat as the forward's copies and the gradient fusions'
   exceed the saving fusions': gelu's bias add none, `1 + tanh` one (hloflops.remat.twin_saves).
   A cheap value a policy stores instead (gelu's `h`), read back by the recompute fusions and the
   gradient's residual chains, is computed by that program's counterparts of those fusions: where
   they exceed this program's forward copies, as many counted recomputes of its opcode and size in
   the reading fusions are model FLOPs. A recomputed value XLA stores rather than copies (it reads
   two whole values: a residual add `x + attn`, and the bias add read only by it) is on no saving
   fusion's chain: that program computes it once in its forward, so every backward copy is remat.
   A residual read is one saving fusion unless an earlier gradient fusion repeats it (the same
   reading values: XLA copies the chains into each of a gradient's unfusable readers, input,
   weight and bias gradients, and repeats a layer norm's backward per layout), and a
   recompute fusion handed reshaped to weight gradients is one more, settled above or not. Copies
   beyond what the recompute's copies carry are the gradient fusions', up to those beyond one per
   residual, and so for a value only gradient fusions compute (jvp's `1 - tanh`).
   A residual is also what a recompute fusion hands out to a backward matmul (a weight's gradient
   reads the recomputed layer norm output, the keys' gradient the query): the twin saves it too,
   each distinct residual once (a reshaped stand-in of it is that same saving copy), while the cap
   on gradient copies counts the gradient fusions' residuals alone. Where the twin computes a value
   more often than this program (gelu's bias add), its extra copies offset counted recomputes of
   that opcode in the fusions copying it: the split is per opcode. The forward's copies of a
   value are the forward ops of its name that compute it (its abstract value or computation
   tree, or where none matches, that tree with the recompute's loop inputs, such as an offloaded
   matmul output the forward computes in place, standing for any computation), not every op of
   that name: a layer norm's mean and mean square are both `div`. A
   reduced square's coefficient `2 * x` (a variance's) is computed and saved by the program
   without remat's forward; here XLA folds its 2 into the reduce's broadcast cotangent in the
   backward loop, so one multiply of the square's size runs in the twin alone and offsets a
   counted recompute (hloflops.remat.folded_coefficients); the gradient's `x * broadcast(2 * s)`
   the fold leaves reads that residual, not `x`. On TPU, where that copy accounting is skipped,
   a variance's counted square (centred or flax's uncentred `x * x`) is itself the given-back
   multiply (hloflops.remat.tpu_folded_squares). A recompute fusion's value read by a backward
   reduce (a library fusion: the rsqrt's gradient `sum((x - mean) * g)`) is saved by the twin too.
   On TPU the program without remat's forward loop computes the residuals' chain once, in one
   saving fusion, and its backward loop computes the gradient once from the stored residuals;
   the program with remat's backward loop copies each recomputed value into every fusion reading
   it, and the gradient's chain too where it then reads fewer inputs than the residuals it stands
   for (gelu's `x` against `tanh`, `1 - tanh`, `0.5 * (1 + tanh)`, `3 * x * x`: XLA copies it into
   the bias's reduce and both matmuls' fusions rather than store it; relu's mask, from `x` alone,
   both programs copy alike). So a recomputed value's copies in the backward loop run because of
   remat (a copy with a unit dimension more among them) but the one the saving fusion stands
   for (unsure where the forward computes the value
   too; none for a value the forward hands out of a fusion or computes outside the loop, or a saved
   matmul output's bias add, stored from the matmul's fusion, where the forward's add reads a
   matmul's output: not a windowed einsum's loop, tensor parallel; none either for a value only on
   the chains of residuals the forward hands out, narrowed too where matmuls alone read them; two
   for a residual of broadcasts alone on another residual's chain, a layer norm's `scale *
   rsqrt(var)`, whose stacking broadcast XLA moves into its operands, an op apart from the chain's
   copy; none for a join of two inputs' chains, flax's `mean(x * x) - mean(x) ** 2`, and what it
   is computed from, which that program computes once and hands out rather than make each reader
   read both inputs, but one for such an operand handed out for other readers, the mean), and so
   do the gradient's copies
   beyond one (on how XLA fused that program: in the range), in the forward's own frame too where
   the chain reads a recompute of a forward value. Not for a recompute running a loop
   of its own (a `while` named inside the checkpoint; not flax's `remat_scan`, whose layers jax
   recomputes in the backward loop; hloflops.remat.backward_loop_copies).
   On TPU under tensor parallelism, a forward matmul run as a windowed einsum loop where the
   backward's weight gradient gathers a recompute rather than the forward's gathered activation
   (the loop XLA builds for that matmul, named as it; not a model's loop around matmuls):
   the program without remat shares one gather and runs one matmul, so the loop's accumulating
   adds and selects are remat (hloflops.remat.regathered_windowed_einsums; the weight's narrow
   for the loop in the range). So where the recompute's matmul gathers its own operand under its
   remat name (haiku), for a loop named as its matmul.
   So where the backward all-gathers the saved activation itself, under the transpose's name,
   in the loop's own frame (hloflops.remat.regathered_forward_windows).
   So for a loop whose products XLA writes as multiply and reduce (a matrix-vector product), also
   where the gather is an all-reduce of the value written into zeros (hloflops.remat.windowed_matvec_loops).
   Under FSDP, an activation TPU gathers in windows (collective-permutes, `-inf` pad maximums)
   for a forward matmul and again for its weight gradient in one frame: the program without remat
   gathers it once for both, so the windows' concatenations, row selections and partial sums are
   remat (hloflops.remat.twice_windowed_gathers).
6. Layout copies (after optimization): a cheap value read in two layouts is copied by XLA into
   one fusion per transposition; a remat-marked such fusion writing a layout the forward does
   not, beside the forward's fusion of the same value writing another, stands in for the copy
   the program without remat makes for its backward: model FLOPs, unsure
   (hloflops.remat.view_copies); so is one handing the value out as it is where the forward only
   writes it transposed and the recompute computes it nowhere else (its layout copy merged into
   the forward's: a cross attention's key; hloflops.remat.natural_layouts).
   A recomputed f32 -> bf16 narrow fused alone into one reader's shape is loose (the program without
   remat may narrow per reader shape in its forward; hloflops.remat.reader_shape_narrows).
7. Collectives of recomputes (sharded programs): a remat-marked all-reduce or reduce-scatter
   whose every operand is computed by a recompute (the all-reduce completing a
   recomputed matmul's partial sums) is recompute, as sure as its operands: its own value often
   matches nothing, XLA's combiner having merged the forward's into a variadic all-reduce with
   backward ones. A variadic one only partly of recomputes is the all-reduces it merged, one per
   operand: its recomputed operands' share of its elements is remat (`Row.remat_part`), and an
   all-reduce-scatter fusion of a recompute computes its slice offset again. Under FSDP an
   all-reduce gathering a weight's shard (written into zeros at the device's offset) that an
   earlier all-reduce gathered, read by a recompute, gathers it again because the checkpoint's
   barrier keeps CSE from merging the recompute's gather with the forward's: those elements are
   remat (hloflops.remat.collectives). So, on TPU, is an unnamed narrow of a weight shard for a
   gather, or for a tensor-parallel windowed einsum's loop, where an earlier one narrowed that
   shard already, or a backward loop's trip slice of a stacked weight only gathers read (in the
   range; hloflops.remat.regathered_narrows, hloflops.remat.regathered_loop_narrows).
   So is an unnamed narrow read only by collective-permutes under a remat name, a recompute's
   windowed einsum passing its windows on (in the range; hloflops.remat.recompute_permute_narrows).

8. Ops XLA could not simplify across a checkpoint's barrier (after optimization, not TPU): its
   simplifier moves a broadcast below an elementwise op whose operands are all broadcasts
   (`convert(broadcast(g))` -> `broadcast(convert(g))`), unless jax's barrier on what the
   checkpoint's backward reads stood between them (a bf16 cotangent widened to f32 in each fusion
   of the backward). The FLOPs such an op runs beyond those on the broadcast's operand are remat:
   a share of its row (`Row.remat_part`; hloflops.remat.unsunk_broadcasts).
9. Float normalization's widens (after optimization, CPU: a bf16 value widened to f32 once per
   fusion reading it) follow the fusions: the program without remat's forward, whose backward reads
   every intermediate, is split into fusions as the recompute is, where the forward of a
   checkpointed block fuses its chains into few. So of a value's widens in the recompute's fusions,
   as many as the forward's fusions widen it run because of remat, the rest are the program without
   remat's too; a recompute fusion that only relays its value out for backward matmuls widens as
   that program's relayout of the forward's value does: model FLOPs, but for a bias it broadcasts
   in (hloflops.remat.widen_counts; rests on fusion); a widen alone in its fusion, of a recompute's
   value and read by recomputed ops only, is a recompute fusion's, and a recompute's value numbered
   apart from the forward's (its input read through the barrier) counts as often as the forward
   widens each of its values of that primitive, shape and frame, where they agree; a fusion of
   recomputed ops whose value pairing left to the forward's copy (a residual sum) still widens a
   forward value it reads (a bias's cast) for its recompute, counted so. The narrowing a
   fusion applies to a value it reads in f32 (a library matmul's output, rounded in each loop fusion reading it) before
   widening it is copied per fusion too, and follows that widen (a stored rounding the recompute
   reads, beside the forward fusion's own round trip of the value, is remat); a recompute's rounding named
   after a nested checkpoint's barrier (`.../remat2`) follows the op it rounds
   (hloflops.remat.normalization). A value is matched by its name inside the
   checkpoint, or by its value number where the name is a bare primitive's or the value a
   program input. Under a checkpoint around the whole model (the recompute reads nothing the
   forward computed but the policy's residuals, the forward hands nothing to the backward) the
   forward, storing nothing, widens values in every reader: all its widens of checkpointed values
   are remat, the recompute's model FLOPs; and it copies a value it never stores (a residual sum)
   into each fusion reading it, where the recompute stores it once as the program without remat's
   forward does: all those forward copies are remat, for a value a recompute fusion computes
   (hloflops.remat.whole_checkpoint_widens). Where the recompute reads forward values only through
   CSE's shared copies, or the forward hands the backward only a weight's cast, the split holds for
   the values computed from program inputs by loop fusions alone (the embedding's lookup), not past
   a shared value or a library op. Where CSE kept one copy of a value the forward and
   the recompute both compute from program inputs (the first layer's matmuls), the recompute reads
   the forward's: that value is narrowed and widened for the recompute and the backward as the
   program without remat does, and the converts the forward's own fusions make of it (a round
   trip in place) are remat, as many as they are (`shared_value_converts`); the round trips of
   a shared value no forward-only fusion copies are left to the widen count. A checkpoint
   input the forward left in f32 (a bf16 residual add) crosses the checkpoint's barrier narrowed
   (`.../remat2`): the backward fusions reading it widen it again, where the program without
   remat's backward reads the wide value; those widens are remat, however many forward fusions
   read the narrow value (hloflops.remat.pinned_inputs; rests on fusion).
   A recompute relaid out for backward matmuls runs every convert of its chain because of
   remat (the widens of what it reads, the roundings of its ops and of an f32 value it reads) but
   one widen of the value it hands out: the program without remat relays out its stored value,
   widening it once (hloflops.remat.recompute_converts; rests on fusion). A fusion only widening a
   forward value for recomputes is on the recompute's side of the widen count, counted last.
10. A recomputed reciprocal the backward shares (after optimization): XLA rewrites `e / s` as
   `e * (1 / s)`, the backward's `ct / s` too, and CSE keeps one `1 / s` for both under the
   recompute's name. Where the forward runs in another loop body (a scan), the program without
   remat computes its backward's `1 / s` there too: model FLOPs, unsure
   (hloflops.remat.shared_reciprocals); and so where the loops are gone (a scan unrolled into
   one-trip loops XLA removed) but the computation still stacks the scan's residuals, which the
   program without remat's backward reads `s` through. In one computation without such a stack
   (a Python loop, a one-step scan), the program without remat shares the forward's instead,
   and the recompute's is remat.

Ops without metadata are named by what they read (through the unnamed ops XLA adds, a program
input counting as a forward value; after
optimization so is an elementwise op named in a checkpoint's transpose that reads a constant, its
cotangent folded, and otherwise the recompute's values alone: CSE merged it with the recompute's
op of its value, softmax's `1 / s`; not in a frame where the forward stacks a scan's residuals,
whose backward computes it again in both programs) or, for a
dot duplicating a value, by what reads it, and so is the unnamed reduce-window XLA splits off a
long reduce (its partial sums) where every reader is a remat-named reduce; views are numbered by the elements they hold
(hloflops.remat.views); a custom-call that moves a value between memories (an offload policy's
`annotate_device_placement`, `MoveToHost`, `MoveToDevice`) is the value it moves, and never
pairs itself (it computes nothing again); so, after optimization, is a move TPU makes on the
device before each read of a weight, the forward's and the recompute's apart: a prefetch into
another memory space (`copy-start` / `copy-done`) and an FSDP gather's async collective (the
shard its start carries on, what its done's collective gathers, also where the shard rides a
loop's state the body hands back unchanged: a loop's such element is its initial value), but not a round trip through
the host (the offload policy's saved residual, which the recompute reads as an input;
hloflops.remat.moved_values); an identity reduce-precision (a policy's saved residual; after XLA's float
normalization a bfloat16 residual widened to f32 and rounded to bfloat16's bits, with its round
trip, also where XLA fused that round trip into the matmul's library fusion:
hloflops.remat.rounding) is remat, and so, before optimization, is a barrier-marked op of
constants alone (jax folds it without remat), and after it an op of constants alone named in a
checkpoint's transpose (the program without remat computes none).
Where an answer hinges on weak evidence (`RematIndex.weak`, `RematIndex.unsure`: a signature pairing
in the recompute's own frame that reads a marked op left without a twin, a rule 6 copy, a rule 7
collective of weakly paired recomputes; after optimization a cheap copy paired with its forward in another loop body
whose count rests on fusion, and the copies of a class counted against forward copies in another
loop body, hloflops.remat.across_loops, also where it feeds a recomputed expensive op if the
backward loop's gradient fusions copy its value and a recomputed residual's cheap chain holds it too
(the program without remat may copy it into more fusions saving residuals than the gradient fusions
copy it), and with it the cheap ops of each recompute fusion that copies it (the program without
remat's forward computes that fusion's chain too, fused alike: gelu's tanh fusion, where the twin
runs the bias add more often than this program in all); uncounted, the copies of a value that rule 4
finds in two or more gradient fusions of a backward loop whose forward runs in another loop body,
where the program without remat reads the value stored and computes it once, saving it
(hloflops.remat.fusion_copies), and a forward op
copied into the fusion storing a policy's saved residual into a loop's stack, a value the program
without remat saves only where its backward reads it itself (hloflops.remat.rounding; counted, and
sure, where the other loops read the stored value only in recomputes of forward ops: tanh's `h`,
whose derivative reads `t`; so, counted, for an offload policy's residual, which no rounding marks
on CPU: a stack only recomputes read, hloflops.remat.unmarked_saves); an
uncounted float normalization widen (bf16 to f32)
inside a recompute's fusion, whose count follows how XLA fused the program without remat's
forward, hloflops.remat.normalization) the report gives a range
(`remat_flops_bounds`). Its low end drops too by the copies the program without remat makes of a
value a policy stores (gelu's `h`: copied into the twin's forward fusions and each fusion saving a
residual computed from it) beyond this program's and beyond the recomputes they offset
(`RematIndex.twin_copies`, hloflops.remat.stored_twin_copies), and by those it may make of a loss
gradient's scale `(pred - y) * c` that a matmul's output fusion here stores once for k readers,
copying it into each (hloflops.remat.stored_scales), and, on TPU, of a recomputed cheap chain a
fusion (a loop fusion, or the output fusion of the matmul computing the cotangent) rebuilds from a
policy's saved matmul output and stores narrowed for k matmuls (gelu's gradient), which the program
without remat may copy into each matmul's fusion instead
(hloflops.remat.stored_gradient_chains), and of a select stored here once: the
embedding lookup's out-of-range fill, which the recomputes read too (the twin copies it into its
other readers, with the elementwise chain a recompute here runs on it), and, on TPU, a scan's ReLU
gradient over a recomputed mask (the twin stacks the mask and copies the select into each reader,
or, the mask fused with the recompute's matmul, copies its bias add into the fusion stacking it;
hloflops.remat.stored_selects), and on TPU by one narrow per operand fusion nesting `relu(h + b)`
over an offloaded bare matmul output (the twin stores the sum and may narrow the activation there;
hloflops.remat.offloaded_sum_narrows): the per-opcode truth is negative there, and no split of this
program's ops can match it. On CPU the program without remat also spends converts storing a bfloat16
residual in a scan's stack, for each residual this program's backward loop recomputes and narrows
(unnamed, or named for the call enclosing it): a value computed from a recomputed matmul, or the
recompute's cast of a kernel sliced from the loop's input, read by a gradient op. Float
normalization computes the stack's dynamic-update-slice in f32 (the whole stack widened and narrowed
back each trip, the slice widened) and the backward's read as a hoisted widen of the stack and a
narrowing of the slice, which the recompute's narrowing here stands for: 2 * trips + 2 slice-sized
converts per trip are the twin's alone, sure, and go into the split itself as a negative remat share
of that narrowing (`RematIndex.twin_stores`, `Accounting.remat_twin_stores`: remat FLOPs of convert
may go below this program's count, model FLOPs above it); the twin's forward narrowing of a residual
its forward alone computes, and the widens of its inputs fused into the stack's update (2 per
residual), are sure too where the narrowing here was not counted as remat (this forward narrows no
such value), else they lower the low end (as 1 per kernel cast, which both forwards narrow).
On TPU the loss's cotangent `y * (2 / n)`, which XLA's multi-output fusion hands out of the loss's
own fusion (beside `sum(y * y)`) to k readers, runs once here; the program without remat may hand
out `y` and copy the multiply into each reader, or merge it alike: k - 1 copies lower the range's
low end (`twin_copies`; hloflops.remat.loss_cotangent_copies). Where the loss's fusion is the
output fusion of the forward's last matmul outside every loop body, the twin copies it into every
reader: the k - 1 copies are sure (`twin_stores`; hloflops.remat.matmul_loss_cotangents).
Where a backward fusion of its own narrows that cotangent for k > 1 readers, the twin may copy
the f32 chain into each and run no narrow: the chain's k - 1 copies lower the low end, the narrow
raises the high end (hloflops.remat.loss_cotangent_copies.narrowed_cotangent_copies).
A matvec TPU rewrote as `reduce(broadcast(v) * w)` leaves its multiply unnamed: the multiply takes
its reduce's answer (matvec_multiplies); a recompute's whole matvec whose forward ran as a window
loop pairs with no value and is remat, weak (hloflops.remat.windowed_forward_matvecs).
A cheap forward value a checkpoint reads as its input, which the checkpoint's barrier kept from
being copied into its readers here, may be copied into each of them by the program without remat:
its readers outside the recompute less one lower the low end (`twin_copies`;
hloflops.remat.checkpoint_input_copies).
Sharded on TPU, where the recompute runs no matmul (a policy saving the dots), a marked cheap copy
in an async collective fusion that no rule counted is unsure (the program without remat may
materialize the value once where the recompute copies it into each gradient collective fusion:
hloflops.remat.collective_fusion_copies).
On TPU, a marked cheap copy nested in a gradient fusion, of a value this program's forward outputs
from a fusion of its own, is unsure: the program without remat may read the stored value there
(hloflops.remat.stored_forward_copies).
On TPU, a checkpoint's cheap backward op reading a marked op in its fusion and, through cheap ops, a
remat-named matmul (the rebuilt `h` of gelu's derivative chain), computed in several fusions, is
unsure beyond its first copy: the program without remat may compute the chain once, behind the
cotangent's matmul, and store it (hloflops.remat.copied_gradient_chains).
In a scanned layer on TPU, a recompute's relu narrowed in a fusion of its own, whose forward copies
are all nested in the next matmul's fusion, may be copied by the program without remat into each
reader, a widen and a narrow each: the readers plus one lower the low end (`twin_copies`;
hloflops.remat.unstored_relu_narrows).
On TPU, a forward relu fusion's widen of its own bf16 matmul output, where the fusion hands out only
the narrowed activation and a recompute runs the matmul again, is unsure: the program without remat
stores the f32 pre-activation and may run no widen (hloflops.remat.narrowed_forward_widens).
A cheap chain the forward only copies into its matmuls, which the recompute stores for a gradient
matmul, may be copied into each weight's gradient by the program without remat: one more copy per
forward matmul copy lowers the low end (`twin_copies`; hloflops.remat.gradient_reader_copies).
Where XLA peeled a loop's trip off, or unrolled a layer loop whole (a stack's `dynamic_slice` a
static slice), and pruned layer 0's dead input gradient, the program without remat may run its loop
whole: a trip of each op the peeled trip or unrolled copy lacks, window loops too (`twin_trips`;
remat.peeled_iterations, remat.unrolled_iterations), the surviving input-gradient matmul once
(`twin_copies`) and a convert of each narrowing slice's elements (`RematIndex.twin_narrows`) lower
the low end (hloflops.remat.unrolled_layer_loops).
On TPU a packed 3x3 layer's weight gradient runs packed (the forward's count, and a packing of its
own) or natural (the in-bounds taps only), as XLA fused the bias gradient beside it, which it
decides in the program without remat apart: natural here lowers the low end by the packed count
over this one and the twin's packing of the pieces; packed here raises the high end by its count
over the natural form's floor and its own packing (`RematHinge.twin_form`;
hloflops.remat.weight_gradient_forms).
A 3x3 convolution TPU runs natural beside a packed one of its geometry (host offload pins the saved
activation's default layout: the forward convolutions writing and reading it and their weight
gradients) may run packed in the program without remat, which offloads nothing: the packed count
over this one and the twin's packing of its input lower the low end (`RematHinge.twin_form`;
hloflops.remat.natural_convolution_forms).
TPU's hinges of copies the program without remat may make (a recompute nested in a backward
matmul's operand, its value stored or fused into every reader; one handed out beside the gradient
through it; a layer loop's gathered operands packed again; an unrolled loop's pruned input gradient;
the loss's cotangent) are gathered by hloflops.remat.tpu_twin_hinges, each rule in its own module
(docs/remat.md describes each).
A backward loop's recompute of softmax's `e / s` whose forward copy only matmuls read (this program
stores no `p`) may stand for the copy the program without remat makes to store `p`: a hinge of one
copy (`twin_copies`; hloflops.remat.unstored_probabilities).
A relu mask the recompute computes inside the one backward fusion of its select (outside a scan's
backward loop), reading the handed-in preactivation, the select read by a convolution's gradient,
may stand for the mask the program without remat hands from its forward packed into bits and
unpacks in each reader of the select's value: a hinge of the packing, the unpacks and their selects
(`twin_copies`; hloflops.remat.twin_packed_masks).
A recomputed mask this program packs outside a scan's backward loop is packed alike by the program
without remat (its forward's): the packing and unpacks are model FLOPs, settled
(hloflops.remat.twin_packed_masks' `shared_mask_packings`).
A layer's output gradient that only matmuls read besides its bias gradient's reduce, read wide
here, may be narrowed once by the program without remat in a fusion merging that reduce: one
convert of it lowers the low end (`RematIndex.twin_narrows`; hloflops.remat.bias_gradient_narrows).
Where the twin's backward loop packs a layer loop's windowed-gathered operands again, it may compute
the layer's weight gradient from those windows,
adding its partial gradients: each forward windowed matmul's window beyond the first is a low-end
hinge of one add of its kernel's elements (`twin_sums`; hloflops.remat.windowed_gradient_sums).
Remat-named ops that pair with nothing, or that rule 4 finds are copies, are listed
(`RematIndex.merged`, `Report.remat_unpaired`) and counted as model FLOPs. Checked on
tests/programs/remat_programs*.py: dot and convolution remat FLOPs equal the difference to the
program without remat exactly (after optimization, before with and without op_name metadata, but for
the listed known gaps); elementwise and reduce ops come within a few percent of it after
optimization (XLA fuses the two programs differently).
The twin copies of a stored gradient chain count where the policy offloads the saved matmul output
and the chain holds an expensive recompute (hloflops.remat.offloaded_chain_residuals); those of a
stored scale count through its cheap readers' own readers (hloflops.remat.cascaded_readers).
"""

from hloflops.remat.names import (  # noqa: F401
    REMAT_SCOPE, XLA_REMAT_SUFFIX, OpNames, inner_tail, is_remat_named,
)
from hloflops.remat.index import RematIndex  # noqa: F401
from hloflops.remat.pairing import find_remat  # noqa: F401
from hloflops.remat.xla_clones import remat_fusion_bodies  # noqa: F401
from hloflops.remat.values import ValueNumbers, value_numbers  # noqa: F401
from hloflops.scopes import WRAPPER, is_absolute, model_path, phase, scope, split_components  # noqa: F401
