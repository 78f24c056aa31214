"""com.microsoft generation loops: GreedySearch, BeamSearch, Sampling over a GPT-2 style
decoder; BeamSearch over a T5/BART style encoder-decoder pair (``model_type=1``) or a Whisper
one (``model_type=2``), and WhisperBeamSearch.

These operators hold a ``decoder`` graph attribute and run it once per generated token,
feeding back its ``present_*`` outputs as ``past_*`` inputs (onnxruntime's convention for
``model_type=0``: inputs ``input_ids``, ``position_ids``, ``attention_mask``, ``past_0..``
→ outputs ``logits``, ``present_0..``; past state shaped ``(2, batch*beams, heads,
past_len, head_size)``). The decoder runs through :meth:`KernelInfo.subgraph` — the
session's providers, so a GPU session runs its nodes on the device — and reads the outer
scope (weights the convert tool hoists into the main graph) as control-flow bodies do.

Host algorithm: the search itself (log-softmax of the last logits, the logits processors,
top-k over beams, the hypotheses' bookkeeping, sampling, reordering past state by beam)
works on small arrays and is sequential token by token, so it is computed with numpy on
the host (:meth:`OpKernel.host`) in float32 (the sampling draw in float64, as onnxruntime);
the results go back with ``self.xp.asarray``.

Semantics are onnxruntime's CPU kernels' (checked against it in the tests):

* position ids count the prompt's tokens that are not ``pad_token_id`` (a pad token gets
  position 0) even when ``attention_mask`` is given — the mask is passed on as given,
  extended by one 1 per step;
* the logits processors run in onnxruntime's order — repetition penalty (a seen token's
  score multiplied by the penalty when negative, divided when not), no-repeat n-gram,
  ``vocab_mask``, ``prefix_vocab_mask`` (first step only), min length (eos barred while the
  sequence, prompt and padding included, is shorter), then for Sampling temperature and
  presence penalty — setting barred scores to float32's lowest value; greedy search and
  sampling apply them to raw logits, beam search to log-softmax;
* greedy search and sampling: once a sequence emits ``eos_token_id`` that token and every
  later one is written as ``pad_token_id``; the loop stops when every sequence has ended.
  onnxruntime leaves the columns after that stop unwritten (whatever its buffer held);
  onyxrt writes ``pad_token_id`` there;
* beam search: the first beam of each batch starts at 0, the others at -1e9; the 2*beams
  best (beam, token) candidates feed the scorer; an eos candidate ranked within the first
  ``num_beams`` becomes a finished hypothesis *without* the eos token, scored
  ``sum_logprobs / length ** length_penalty`` (length: prompt with padding plus generated
  tokens); a batch is done when it holds ``num_beams`` hypotheses and (``early_stopping``
  or) none of the best running candidates can beat the worst — onnxruntime reads those
  candidates at offset ``batch * num_beams`` of the top-k list (not ``batch * 2 *
  num_beams``), kept here; finished hypotheses tie-break in insertion order. The per-step
  ``scores`` output holds zeros for steps not run (onnxruntime leaves them unwritten);
* sampling: top-p filtering over the scores sorted ascending (``custom=1``: descending, its
  own cut), a float32 running sum compared as onnxruntime does, then one draw per row from
  libstdc++'s ``minstd_rand0`` engine (onnxruntime's ``std::default_random_engine``) seeded
  with the ``seed`` input, reproduced bit for bit, so the same seed gives the same tokens;
  ``presence_penalty`` lands entirely on the first score (onnxruntime's loop never moves
  its pointer); ``filtered_logits`` is never written (None), as onnxruntime's CPU kernel.

BeamSearch with ``model_type=1`` (onnxruntime's ``beam_search_impl_t5.h``,
``subgraph_t5_encoder.cc`` / ``subgraph_t5_decoder.cc``): the ``encoder`` graph runs once on
``encoder_input_ids`` (the operator's ``input_ids``, not expanded by beams),
``encoder_attention_mask`` (the ``attention_mask`` input, else 0 only for *leading* pad
tokens — a trailing pad/eos token keeps 1) and ``decoder_input_ids`` (batch, 1) filled with
``decoder_start_token_id``, and gives ``logits``, ``encoder_hidden_states``,
``present_{key,value}_self_*`` then ``present_{key,value}_cross_*``: its logits are the
first step's. The ``decoder`` then takes ``input_ids``, ``encoder_attention_mask``,
optionally ``encoder_hidden_states``, ``past_{key,value}_self_*``, ``past_{key,value}_cross_*``
(each expanded to batch*beams) and gives ``logits`` and the self presents; the cross state
is passed on unchanged. Its ``input_ids`` are the last tokens when declared (batch, 1), else
the whole sequences. Sequences start with the start token (so ``max_length`` > 1, the
length penalty and min length count it, ``scores`` has ``max_length - 1`` steps); the loop
does not ask the scorer whether it is done after the encoder's step (one more step's
``scores`` get written). With ``max_length == 2`` onnxruntime skips the encoder's step and
runs the decoder on feeds it never wrote (garbage tokens, or a failing Gather); onyxrt takes
the encoder's step. onnxruntime also feeds the decoder's ``encoder_hidden_states`` as an
expanded buffer it never fills (``ExpandBuffer`` with ``only_copy_shape``): its exported
decoders read only that input's shape; onyxrt passes the encoder's values, expanded.

Whisper (``model_type=2``, WhisperBeamSearch; ``beam_search_impl_whisper.h``): the same loop
without attention masks — the encoder takes ``encoder_input_ids`` (the audio features, the
operator's float ``input_ids``) and ``decoder_input_ids`` (input 10 when given: the decoder's
prompt, e.g. start / language / task tokens, which the sequences start with; else the start
token), the decoder ``input_ids``, optionally ``encoder_hidden_states``, the past self and
cross state. WhisperBeamSearch's ``temperature`` divides the processed log-softmax scores
(after the other processors; checked: the sequence scores scale by 1/temperature).

Beam reordering (every model type, as onnxruntime): a finished batch's rows take beam
index 0 — row 0 of the whole batch*beams — for their sequences (which the repetition penalty
and n-gram processors then read) and past state; with ``num_beams == 1`` onnxruntime passes
the past state on without reordering it at all.

Known gaps, with reasons: GreedySearch and Sampling with ``model_type`` != 0 are refused
(onnxruntime's CPU kernels refuse them too); ``init_decoder``, decoders that share past and
present buffers (``past_sequence_length``, ``cache_indirection`` inputs: the masked
multi-head attention path) and the newer T5 encoder format without ``decoder_input_ids``
(its encoder gives only the cross state) are refused at session creation — not checked
against onnxruntime here; so are WhisperBeamSearch's alignment-head outputs (``cross_qk``,
``non_speech_probs``: onnxruntime computes cross_qk only on that masked-attention path)
and the inputs ``cross_qk_layer_head`` and ``extra_decoding_ids`` (not checked); a non-zero
``logits_processor`` input (Whisper's timestamp processor) is refused when run. Sampling with
``top_p=0`` (its default) samples the whole distribution: onnxruntime's result there reads
unwritten memory and changes from run to run, so it cannot be matched.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt.limits import check_terminated

from .library import OpKernel, library

# The operators are reached through ``library`` (this module registers them on import).
__all__: list[str] = []

MS = "com.microsoft"
_LOWEST = np.finfo(np.float32).min
_I32 = (np.int32,)


class _Generation(OpKernel):
    """What the generation loops share: the decoder's conventions (model_type=0; BeamSearch
    adds model_type=1), reading the steering inputs, the logits processors and the decoder's
    feeds from step to step."""

    #: positions of the optional inputs (None: the operator has no such input)
    MIN_LENGTH = 2
    REPETITION = 3
    VOCAB_MASK = 4
    PREFIX_MASK = 5
    ATTENTION = 6

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.model_type = int(info.attr("model_type", 0))
        if self.model_type not in self.MODEL_TYPES:
            raise InvalidGraph(f"{self.where()}: model_type={self.model_type} is not supported here "
                               f"(supported: {self.MODEL_TYPES}; {self.MODEL_TYPE_NOTE})")
        if info.attr("init_decoder") is not None:
            raise InvalidGraph(f"{self.where()}: an init_decoder subgraph is not supported")
        if "pad_token_id" not in info.attributes or "eos_token_id" not in info.attributes:
            raise InvalidGraph(f"{self.where()}: attributes eos_token_id and pad_token_id are required")
        body = info.attr("decoder")
        if not isinstance(body, onnx.GraphProto):
            raise InvalidGraph(f"{self.where()}: the decoder graph attribute is required")
        self.eos = int(info.attr("eos_token_id"))
        self.pad = int(info.attr("pad_token_id"))
        self.ngram = int(info.attr("no_repeat_ngram_size", 0))
        self.n_explicit = len(info.input_names)
        if self.model_type == 0:
            self._check_decoder(body)
        else:
            self._check_encoder_decoder(info, body)
        self.decoder = info.subgraph("decoder")

    #: the model types an operator runs, and why the others are refused
    MODEL_TYPES: tuple[int, ...] = (0,)
    MODEL_TYPE_NOTE = "onnxruntime's GreedySearch and Sampling run only model_type=0 (a GPT-2 style decoder)"

    def _check_encoder_decoder(self, info: KernelInfo, body: onnx.GraphProto) -> None:
        """model_type=1 (a subclass's): validates the encoder and decoder graphs."""
        raise NotImplementedError

    def _check_decoder(self, body: onnx.GraphProto) -> None:
        ins, outs = [i.name for i in body.input], [o.name for o in body.output]
        want = ["input_ids", "position_ids", "attention_mask", "past_0"]
        if ins[:4] != want or outs[:2] != ["logits", "present_0"]:
            raise InvalidGraph(f"{self.where()}: the decoder must take {want}, past_1.. and give logits, "
                               f"present_0..; it takes {ins} and gives {outs}")
        if len(ins) != len(outs) + 2:
            raise InvalidGraph(f"{self.where()}: the decoder has {len(ins)} inputs for {len(outs)} outputs "
                               "(past and present buffers shared through past_sequence_length are not supported)")
        past = body.input[3].type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else 0 for d in past.shape.dim]
        if len(dims) != 5 or dims[0] != 2 or dims[2] <= 0 or dims[4] <= 0:
            raise InvalidGraph(f"{self.where()}: the decoder's past_0 must be shaped (2, batch, heads, past, "
                               f"head_size) with heads and head_size known, got {dims}")
        self.heads, self.head_size = dims[2], dims[4]
        self.past_dtype = onnx.helper.tensor_dtype_to_np_dtype(past.elem_type)
        self.n_past = len(ins) - 3

    # -- inputs ------------------------------------------------------------------------
    def _scalar(self, inputs: tuple[Any, ...], index: int | None, default: Any, kind: type) -> Any:
        if index is None or index >= min(len(inputs), self.n_explicit) or inputs[index] is None:
            return default
        value = self.host(inputs[index]).reshape(-1)
        if value.size != 1:
            raise ValueError(f"input {index} must hold one value, got {value.size}")
        return kind(value[0])

    def _optional(self, inputs: tuple[Any, ...], index: int | None) -> np.ndarray | None:
        if index is None or index >= min(len(inputs), self.n_explicit) or inputs[index] is None:
            return None
        return self.host(inputs[index])

    def _outer(self, inputs: tuple[Any, ...]) -> dict[str, Any]:
        outer = {name: v for name, v in zip(self.info.input_names, inputs[: self.n_explicit]) if name}
        outer.update(zip(self.info.implicit_inputs, inputs[self.n_explicit :]))
        return outer

    def _prompt(self, inputs: tuple[Any, ...], prompt: int | None = None) -> tuple[np.ndarray, int]:
        """input_ids and max_length, which must exceed the decoder's prompt (``prompt``, by
        default input_ids' length; 1, the start token, for an encoder-decoder model)."""
        ids = self.host(inputs[0]).astype(np.int32)
        if ids.ndim != 2 or ids.shape[1] == 0:
            raise ValueError(f"input_ids must be 2-D (batch, sequence) and not empty, got shape {ids.shape}")
        prompt = ids.shape[1] if prompt is None else prompt
        max_length = self._scalar(inputs, 1, None, int)
        if max_length is None or max_length <= prompt:
            raise ValueError(f"max_length ({max_length}) must exceed the input sequence length ({prompt})")
        return ids, max_length

    def _processors(self, inputs: tuple[Any, ...], batch: int, vocab: int) -> dict[str, Any]:
        vocab_mask = self._optional(inputs, self.VOCAB_MASK)
        prefix = self._optional(inputs, self.PREFIX_MASK)
        if vocab_mask is not None and vocab_mask.shape != (vocab,):
            raise ValueError(f"vocab_mask must be shaped ({vocab},), got {vocab_mask.shape}")
        if prefix is not None and prefix.shape != (batch, vocab):
            raise ValueError(f"prefix_vocab_mask must be shaped ({batch}, {vocab}), got {prefix.shape}")
        min_length = self._scalar(inputs, self.MIN_LENGTH, 0, int)
        if min_length > 0 and not 0 <= self.eos < vocab:
            raise ValueError(f"eos_token_id {self.eos} is outside the vocabulary (size {vocab}) min_length bars")
        return {
            "min_length": min_length,
            "repetition": self._scalar(inputs, self.REPETITION, 1.0, np.float32),
            "vocab_mask": vocab_mask,
            "prefix": prefix,
        }

    # -- the loop's pieces -------------------------------------------------------------
    def _process(self, scores: np.ndarray, seqs: np.ndarray, step: int, proc: dict[str, Any], beams: int) -> None:
        """Apply the logits processors to ``scores`` (batch*beams, vocab) in place."""
        penalty = proc["repetition"]
        if penalty != 1.0:
            for row, seq in zip(scores, seqs):
                seen = np.unique(seq)
                s = row[seen]
                with np.errstate(over="ignore"):
                    row[seen] = np.where(s < 0, s * penalty, s / penalty)
        length = seqs.shape[1]
        if 0 < self.ngram <= length:
            n = self.ngram
            for row, seq in zip(scores, seqs):
                prefix = seq[length - n + 1 :]
                banned = [seq[j + n - 1] for j in range(length - n + 1) if n == 1 or np.array_equal(seq[j : j + n - 1], prefix)]
                row[banned] = _LOWEST
        if proc["vocab_mask"] is not None:
            scores[:, proc["vocab_mask"] == 0] = _LOWEST
        if proc["prefix"] is not None and step <= 1:
            scores[np.repeat(proc["prefix"], beams, axis=0) == 0] = _LOWEST
        if length < proc["min_length"]:
            scores[:, self.eos] = _LOWEST
        self._process_more(scores, proc)

    def _process_more(self, scores: np.ndarray, proc: dict[str, Any]) -> None:
        """Processors a subclass adds after onnxruntime's common ones."""

    def _first_feeds(self, ids: np.ndarray, mask: np.ndarray | None, beams: int) -> tuple[list[Any], np.ndarray]:
        """The decoder's first inputs (expanded to batch*beams) and each row's count of
        non-pad prompt tokens (the next position)."""
        real = ids != self.pad
        positions = np.where(real, np.cumsum(real, axis=1) - 1, 0).astype(np.int32)
        if mask is None:
            mask = real.astype(np.int32)
        elif mask.shape != ids.shape:
            raise ValueError(f"attention_mask must be shaped like input_ids {ids.shape}, got {mask.shape}")
        lengths = np.repeat(real.sum(axis=1).astype(np.int32), beams)
        past = np.zeros((2, ids.shape[0] * beams, self.heads, 0, self.head_size), self.past_dtype)
        expand = [np.repeat(a.astype(np.int32), beams, axis=0) for a in (ids, positions, mask)]
        return [*expand, *([past] * self.n_past)], lengths

    def _step(self, feeds: list[Any], outer: dict[str, Any], rows: int) -> tuple[np.ndarray, list[Any]]:
        """Run the decoder once: the last position's logits (rows, vocab) in float32 and the
        present states."""
        check_terminated(self.info.node_name)
        outs = self.decoder.run(feeds, outer)
        return self._last_logits(self.host(outs[0]), rows), [self.host(p) for p in outs[1:]]

    @staticmethod
    def _last_logits(logits: np.ndarray, rows: int) -> np.ndarray:
        if logits.ndim != 3 or logits.shape[0] != rows:
            raise ValueError(f"the decoder's logits must be shaped ({rows}, sequence, vocab), got {logits.shape}")
        return logits[:, -1, :].astype(np.float32)

    @staticmethod
    def _next_feeds(feeds: list[Any], tokens: np.ndarray, positions: np.ndarray, presents: list[Any]) -> list[Any]:
        mask = feeds[2]
        mask = np.concatenate([mask, np.ones((mask.shape[0], 1), np.int32)], axis=1)
        return [tokens.astype(np.int32).reshape(-1, 1), positions.reshape(-1, 1).astype(np.int32), mask, *presents]


_GREEDY_SIG = (("I", "I", "I", "T", "I", "I", "I"), ("I",))


@library.define("GreedySearch", 1, domain=MS, types={"T": (np.float32,), "I": _I32}, signature=_GREEDY_SIG)
class GreedySearch(_Generation):
    """Greedy decoding: the arg-max token (after the logits processors) at each step;
    ``sequences`` (batch, max_length), padded with ``pad_token_id``."""

    def compute(self, *inputs: Any) -> tuple[Any, ...]:
        ids, max_length = self._prompt(inputs)
        batch = ids.shape[0]
        outer = self._outer(inputs)
        feeds, positions = self._first_feeds(ids, self._optional(inputs, self.ATTENTION), 1)
        seqs, done = ids, np.zeros(batch, bool)
        proc: dict[str, Any] | None = None
        state = self._start(inputs)
        step = 0
        while seqs.shape[1] < max_length:
            step += 1
            scores, presents = self._step(feeds, outer, batch)
            if proc is None:
                proc = {**self._processors(inputs, batch, scores.shape[1]), **state}
            self._process(scores, seqs, step, proc, 1)
            tokens = self._choose(scores, proc)
            done |= tokens == self.eos
            tokens[done] = self.pad
            seqs = np.concatenate([seqs, tokens[:, None]], axis=1)
            if done.all() or seqs.shape[1] == max_length:
                break
            feeds = self._next_feeds(feeds, tokens, positions, presents)
            positions = positions + 1
        out = np.full((batch, max_length), self.pad, np.int32)
        out[:, : seqs.shape[1]] = seqs
        return self._outputs(out, proc)

    def _start(self, inputs: tuple[Any, ...]) -> dict[str, Any]:
        """Per-run state a subclass sets up (the random engine), kept with the processors."""
        return {}

    def _choose(self, scores: np.ndarray, proc: dict[str, Any]) -> np.ndarray:
        """The next token of each row: the first arg-max."""
        return np.argmax(scores, axis=1).astype(np.int32)

    def _outputs(self, sequences: np.ndarray, proc: dict[str, Any] | None) -> tuple[Any, ...]:
        return (self.xp.asarray(sequences),)


class _Hypotheses:
    """A batch's finished hypotheses, best first (onnxruntime's ``BeamHypotheses``)."""

    def __init__(self, capacity: int, length_penalty: float) -> None:
        self.capacity, self.penalty = capacity, np.float32(length_penalty)
        self.items: list[tuple[np.float32, np.ndarray]] = []
        self.done = False

    def score(self, sum_logprobs: np.float32, length: int) -> np.float32:
        return np.float32(sum_logprobs / np.float32(np.power(np.float32(length), self.penalty)))

    def add(self, seq: np.ndarray, sum_logprobs: np.float32) -> None:
        score = self.score(sum_logprobs, len(seq))
        if len(self.items) == self.capacity:
            if score <= self.items[-1][0]:
                return
            self.items.pop()
        at = len(self.items)
        while at > 0 and score > self.items[at - 1][0]:
            at -= 1
        self.items.insert(at, (score, seq))


_BEAM_SIG = (("F", "I", "I", "I", "I", "T", "T", "M", "M", "I", "I", "I"), ("I", "T", "T"))


@library.define("BeamSearch", 1, domain=MS, types={"T": (np.float32,), "F": (np.int32, np.float32), "I": _I32,
                                                   "M": _I32},
                signature=_BEAM_SIG)
class BeamSearch(_Generation):
    """Beam search: ``sequences`` (batch, num_return_sequences, max_length), their
    ``sequences_scores`` and optionally the per-step ``scores`` (max_length - prompt,
    batch, beams, vocab) — over a GPT-2 style decoder or (model_type=1) a T5/BART style
    encoder and decoder; see the module docstring for onnxruntime's conventions."""

    MIN_LENGTH = 2
    REPETITION = 6
    VOCAB_MASK = 7
    PREFIX_MASK = 8
    ATTENTION = 9

    MODEL_TYPES = (0, 1, 2)
    MODEL_TYPE_NOTE = "0: GPT-2 style decoder, 1: T5/BART style, 2: Whisper"
    DECODER_INPUT_IDS = 10  # model_type=2: the decoder's prompt (WhisperBeamSearch's input)

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.early_stopping = bool(info.attr("early_stopping", 0))

    # -- model_type=1/2: T5/BART style or Whisper encoder and decoder ------------------
    def _check_encoder_decoder(self, info: KernelInfo, body: onnx.GraphProto) -> None:
        """onnxruntime's conventions (subgraph_t5_encoder.cc / subgraph_t5_decoder.cc, the
        encoder format with ``decoder_input_ids``; subgraph_whisper_*.cc, the same without the
        attention masks): the encoder runs the first decoder step."""
        encoder = info.attr("encoder")
        if not isinstance(encoder, onnx.GraphProto):
            raise InvalidGraph(f"{self.where()}: model_type={self.model_type} needs the encoder graph attribute")
        e_in, e_out = [i.name for i in encoder.input], [o.name for o in encoder.output]
        whisper = self.model_type == 2
        mask = [] if whisper else ["encoder_attention_mask"]
        if e_in != ["encoder_input_ids", *mask, "decoder_input_ids"]:
            raise InvalidGraph(f"{self.where()}: the encoder must take encoder_input_ids, {', '.join(mask + [''])}"
                               f"decoder_input_ids (the format without decoder_input_ids, whose encoder gives only "
                               f"the cross-attention state, is not supported); it takes {e_in}")
        layers = (len(e_out) - 2) // 4
        want = ["logits", "encoder_hidden_states"] + [
            f"present_{kv}_{kind}_{i}" for kind in ("self", "cross") for i in range(layers) for kv in ("key", "value")]
        if layers < 1 or e_out != want:
            raise InvalidGraph(f"{self.where()}: the encoder must give {want or 'logits, encoder_hidden_states, '}"
                               f"present_key_self_0.. then present_key_cross_0..; it gives {e_out}")
        d_in, d_out = [i.name for i in body.input], [o.name for o in body.output]
        self.hidden = "encoder_hidden_states" in d_in[1:3]
        past = [f"past_{name[len('present_'):]}" for name in want[2:]]
        d_want = ["input_ids", *mask, *(["encoder_hidden_states"] if self.hidden else []), *past]
        if d_in != d_want or d_out != ["logits", *want[2 : 2 + 2 * layers]]:
            raise InvalidGraph(f"{self.where()}: the decoder must take {d_want} and give logits, present_*_self_*; "
                               f"it takes {d_in} and gives {d_out} (past and present buffers shared through "
                               "past_sequence_length are not supported)")
        self.start = int(info.attr("decoder_start_token_id", -1))
        if self.start < 0 and not (whisper and info.has_input(self.DECODER_INPUT_IDS)):
            raise InvalidGraph(f"{self.where()}: model_type={self.model_type} needs decoder_start_token_id >= 0 "
                               "(the encoder's decoder_input_ids) unless the decoder_input_ids input is given")
        ids = body.input[0].type.tensor_type.shape.dim
        # onnxruntime feeds the whole sequence unless input_ids is declared (batch, 1)
        self.whole_sequence = not (len(ids) == 2 and ids[1].HasField("dim_value") and ids[1].dim_value == 1)
        self.layers = layers
        self.encoder = info.subgraph("encoder")

    def _encoder_mask(self, inputs: tuple[Any, ...], ids: np.ndarray) -> np.ndarray:
        mask = self._optional(inputs, self.ATTENTION)
        if mask is None:
            # onnxruntime's CreateEncoderInputs: 0 only for the leading (left) pad tokens
            return (np.cumsum(ids != self.pad, axis=1) > 0).astype(np.int32)
        if mask.shape != ids.shape:
            raise ValueError(f"attention_mask must be shaped like input_ids {ids.shape}, got {mask.shape}")
        return mask.astype(np.int32)

    def _decoder_prompt(self, inputs: tuple[Any, ...], batch: int) -> np.ndarray:
        """The decoder's first tokens: Whisper's decoder_input_ids input, else the start token."""
        given = self._optional(inputs, self.DECODER_INPUT_IDS) if self.model_type == 2 else None
        if given is None:
            return np.full((batch, 1), self.start, np.int32)
        if given.ndim != 2 or given.shape[0] != batch or given.shape[1] == 0:
            raise ValueError(f"decoder_input_ids must be shaped ({batch}, length >= 1), got {given.shape}")
        return given.astype(np.int32)

    def _begin(self, inputs: tuple[Any, ...], ids: np.ndarray, beams: int,
               outer: dict[str, Any]) -> tuple[np.ndarray, dict[str, Any]]:
        """The starting sequences (batch*beams rows) and the loop's state: for model_type=1/2
        the encoder's outputs (its logits are the first step's)."""
        if self.model_type == 0:
            feeds, positions = self._first_feeds(ids, self._optional(inputs, self.ATTENTION), beams)
            return feeds[0], {"feeds": feeds, "positions": positions}
        start = self._decoder_prompt(inputs, ids.shape[0])
        if self.model_type == 1:
            mask = [self._encoder_mask(inputs, ids)]
            ids = ids.astype(np.int32)
        else:
            mask = []
        check_terminated(self.info.node_name)
        outs = [np.repeat(self.host(o), beams, axis=0) for o in self.encoder.run([ids, *mask, start], outer)]
        rows = ids.shape[0] * beams
        static = [*(np.repeat(m, beams, axis=0) for m in mask), *([outs[1]] if self.hidden else [])]
        n_self = 2 * self.layers
        return np.repeat(start, beams, axis=0), {
            "first": (self._last_logits(outs[0], rows), outs[2 : 2 + n_self]),
            "static": static, "cross": outs[2 + n_self :]}

    def _logits(self, state: dict[str, Any], outer: dict[str, Any], rows: int) -> tuple[np.ndarray, list[Any]]:
        first = state.pop("first", None)
        return first if first is not None else self._step(state["feeds"], outer, rows)

    def _feed(self, state: dict[str, Any], seqs: np.ndarray, tokens: np.ndarray, picked: np.ndarray,
              presents: list[Any]) -> None:
        """The decoder's next inputs, past state reordered to the chosen beams."""
        if self.model_type == 0:
            state["feeds"] = self._next_feeds(state["feeds"], tokens, state["positions"],
                                              [p[:, picked] for p in presents])
            state["positions"] = state["positions"] + 1
            return
        ids = seqs if self.whole_sequence else tokens.reshape(-1, 1)
        state["feeds"] = [ids.astype(np.int32), *state["static"], *[p[picked] for p in presents], *state["cross"]]

    def compute(self, *inputs: Any) -> tuple[Any, ...]:
        if self.model_type == 2:  # input_ids: the audio features (batch, features, frames)
            ids = self.host(inputs[0])
            if ids.ndim != 3:
                raise ValueError(f"input_ids (the audio features) must be 3-D, got shape {ids.shape}")
            prompt = self._decoder_prompt(inputs, ids.shape[0]).shape[1]
            max_length = self._scalar(inputs, 1, None, int)
            if max_length is None or max_length <= prompt:
                raise ValueError(f"max_length ({max_length}) must exceed the decoder prompt's length ({prompt})")
        else:
            if np.dtype(inputs[0].dtype).kind == "f":
                raise ValueError(f"input_ids must hold token ids (int32) for model_type={self.model_type}")
            ids, max_length = self._prompt(inputs, 1 if self.model_type else None)
            prompt = 1 if self.model_type else ids.shape[1]
        batch = ids.shape[0]
        beams = self._scalar(inputs, 3, 1, int)
        n_return = self._scalar(inputs, 4, 1, int)
        length_penalty = self._scalar(inputs, 5, 1.0, np.float32)
        if beams < 1 or not 1 <= n_return <= beams:
            raise ValueError(f"num_beams ({beams}) must be >= 1 and num_return_sequences ({n_return}) "
                             "between 1 and num_beams")
        if self._scalar(inputs, 11, 0, int) != 0:
            raise ValueError("the logits_processor input (Whisper timestamps) is not supported")
        rows = batch * beams
        outer = self._outer(inputs)
        seqs, state = self._begin(inputs, ids, beams, outer)
        hyps = [_Hypotheses(beams, float(length_penalty)) for _ in range(batch)]
        beam_scores = np.zeros((batch, beams), np.float32)
        beam_scores[:, 1:] = -1e9
        beam_scores = beam_scores.reshape(-1)
        proc: dict[str, Any] | None = None
        all_scores: list[np.ndarray] = []
        step = 0
        while seqs.shape[1] < max_length:
            step += 1
            logits, presents = self._logits(state, outer, rows)
            vocab = logits.shape[1]
            if proc is None:
                proc = self._processors(inputs, batch, vocab)
            shifted = logits - logits.max(axis=1, keepdims=True)
            scores = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
            self._process(scores, seqs, step, proc, beams)
            scores += beam_scores[:, None]
            all_scores.append(scores.reshape(batch, beams, vocab).copy())
            flat = scores.reshape(batch, beams * vocab)
            top = np.argsort(-flat, axis=1, kind="stable")[:, : 2 * beams]
            top_scores = np.take_along_axis(flat, top, axis=1)
            beam_scores, tokens, picked = self._advance(hyps, seqs, top_scores, top // vocab, top % vocab, beams)
            seqs = np.concatenate([seqs[picked], tokens[:, None]], axis=1)
            # onnxruntime's T5 loop does not look at the scorer after the encoder's step
            stop = all(h.done for h in hyps) and not (self.model_type and step == 1)
            if stop or seqs.shape[1] == max_length:
                break
            # a done batch's rows copy row 0 (onnxruntime's beam index 0); with one beam
            # onnxruntime passes the past state on without reordering it
            self._feed(state, seqs, tokens, picked if beams > 1 else np.arange(rows), presents)
        return self._finalize(hyps, seqs, beam_scores, all_scores, max_length, prompt, n_return, beams)

    def _advance(self, hyps: list[_Hypotheses], seqs: np.ndarray, top_scores: np.ndarray, top_beams: np.ndarray,
                 top_tokens: np.ndarray, beams: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """onnxruntime's ``BeamSearchScorer::Process``: the next beams' scores, tokens and
        source rows; eos candidates become hypotheses."""
        batch = len(hyps)
        length = seqs.shape[1]
        next_scores = np.zeros(batch * beams, np.float32)
        next_tokens = np.full(batch * beams, self.pad, np.int32)
        next_rows = np.zeros(batch * beams, np.int64)
        flat_top = top_scores.reshape(-1)
        for b, hyp in enumerate(hyps):
            if hyp.done:
                continue
            k = 0
            for j in range(2 * beams):
                token, score, row = int(top_tokens[b, j]), top_scores[b, j], b * beams + int(top_beams[b, j])
                if self.eos >= 0 and token == self.eos:
                    if j < beams:
                        hyp.add(seqs[row].copy(), score)
                else:
                    next_scores[b * beams + k], next_tokens[b * beams + k], next_rows[b * beams + k] = score, token, row
                    k += 1
                if k == beams:
                    break
            if len(hyp.items) < beams:
                continue
            if not self.early_stopping:
                # onnxruntime reads the candidates at batch * num_beams (see the module docstring).
                best = flat_top[b * beams : b * beams + 2 * beams].max()
                if hyp.score(best, length) > hyp.items[-1][0]:
                    continue
            hyp.done = True
        return next_scores, next_tokens, next_rows

    def _finalize(self, hyps: list[_Hypotheses], seqs: np.ndarray, beam_scores: np.ndarray,
                  all_scores: list[np.ndarray], max_length: int, prompt: int, n_return: int,
                  beams: int) -> tuple[Any, ...]:
        batch = len(hyps)
        out = np.full((batch, n_return, max_length), self.pad, np.int32)
        out_scores = np.zeros((batch, n_return), np.float32)
        for b, hyp in enumerate(hyps):
            if not hyp.done:
                for i in range(beams):
                    hyp.add(seqs[b * beams + i], beam_scores[b * beams + i])
            for r, (score, seq) in enumerate(hyp.items[:n_return]):
                out[b, r, : len(seq)] = seq
                out_scores[b, r] = score
        steps = np.zeros((max_length - prompt, batch, beams, all_scores[0].shape[-1] if all_scores else 0), np.float32)
        if all_scores:
            steps[: len(all_scores)] = np.stack(all_scores)
        xp = self.xp
        return (xp.asarray(out), xp.asarray(out_scores), xp.asarray(steps))[: max(len(self.info.output_names), 1)]


class _MinStd0:
    """libstdc++'s ``std::default_random_engine`` (``minstd_rand0``) and
    ``std::uniform_real_distribution<double>(0, 1)`` over it, bit for bit: onnxruntime's
    sampling draws from them, so the same seed gives the same tokens."""

    _M, _A = 2147483647, 16807
    _R = float(_M - 1)  # max - min + 1
    _R2 = float((_M - 1) * (_M - 1))  # the long double product rounded to double

    def __init__(self, seed: int) -> None:
        self.state = (seed % self._M) or 1

    def _next(self) -> int:
        self.state = self.state * self._A % self._M
        return self.state

    def uniform(self) -> float:
        # std::generate_canonical<double, 53>: two 31-bit draws
        total = float(self._next() - 1)
        total += float(self._next() - 1) * self._R
        value = total / self._R2
        return value if value < 1.0 else float(np.nextafter(1.0, 0.0))


_SAMPLING_SIG = (("I", "I", "I", "T", "I", "I", "I", "I", "I"), ("I", "T"))


@library.define("Sampling", 1, domain=MS, types={"T": (np.float32,), "I": _I32}, signature=_SAMPLING_SIG)
class Sampling(GreedySearch):
    """Top-p sampling (onnxruntime's): greedy search's loop drawing each token from the
    processed logits after temperature, presence penalty and the top-p filter, with
    onnxruntime's random engine seeded by the ``seed`` input (0 when absent)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.temperature = np.float32(info.attr("temperature", 1.0))
        self.top_p = np.float32(info.attr("top_p", 0.0))
        self.filter_value = np.float32(info.attr("filter_value", -np.inf))
        self.presence_penalty = np.float32(info.attr("presence_penalty", 0.0))
        self.keep = int(info.attr("min_tokens_to_keep", 1))
        self.custom = bool(info.attr("custom", 0))

    def _start(self, inputs: tuple[Any, ...]) -> dict[str, Any]:
        return {"engine": _MinStd0(self._scalar(inputs, 8, 0, int) & 0xFFFFFFFF),
                "presence": self._optional(inputs, 7)}

    def _process_more(self, scores: np.ndarray, proc: dict[str, Any]) -> None:
        if self.temperature != 1.0:
            scores /= self.temperature
        if proc["presence"] is not None and self.presence_penalty != 0.0:
            # onnxruntime's loop never advances its pointer: every term lands on the
            # first score (kept, as a model run against onnxruntime sees it).
            first = scores.reshape(-1)[:1]
            for m in proc["presence"].reshape(-1)[: scores.size]:
                first -= np.float32(m) * self.presence_penalty

    def _choose(self, scores: np.ndarray, proc: dict[str, Any]) -> np.ndarray:
        vocab = scores.shape[1]
        order = np.argsort(-scores if self.custom else scores, axis=1, kind="stable")
        ranked = np.take_along_axis(scores, order, axis=1)
        shifted = np.exp(ranked - ranked.max(axis=1, keepdims=True))
        probs = (shifted / shifted.sum(axis=1, keepdims=True)).astype(np.float32)
        for row, idx, p in zip(scores, order, probs):
            if self.top_p <= 0.0:
                break  # top-p off: the whole distribution (see the module docstring)
            # onnxruntime's running sum, in float32, with its bounds and offsets
            if self.custom:
                cut = [k + 1 for k, c in enumerate(self._running(p, vocab - 1)) if c > self.top_p]
            else:
                limit = np.float32(1) - self.top_p
                cut = [k for k, c in enumerate(self._running(p, max(vocab - self.keep, 1))) if c <= limit]
            row[idx[cut]] = self.filter_value
        tokens = np.empty(len(scores), np.int32)
        for b, row in enumerate(scores):
            finite = np.isfinite(row)
            top = float(row[finite].max()) if finite.any() else float(_LOWEST)
            cdf = np.cumsum(np.where(finite, np.exp(row.astype(np.float64) - top), 0.0))
            draw = proc["engine"].uniform() * cdf[-1]
            tokens[b] = min(int(np.searchsorted(cdf, draw, side="right")), vocab - 1)
        return tokens

    @staticmethod
    def _running(p: np.ndarray, stop: int) -> list[np.float32]:
        out, total = [], np.float32(0)
        for k in range(stop):
            total = p[k] if k == 0 else np.float32(total + p[k])
            out.append(total)
        return out

    def _outputs(self, sequences: np.ndarray, proc: dict[str, Any] | None) -> tuple[Any, ...]:
        # onnxruntime's CPU kernel never writes filtered_logits (its session returns None)
        return (self.xp.asarray(sequences), None)[: max(len(self.info.output_names), 1)]


_WHISPER_SIG = (("F", "I", "I", "I", "I", "T", "T", "M", "M", "I", "I", "I", "I", "I", "T"), ("I", "T", "T", "T", "T"))


@library.define("WhisperBeamSearch", 1, domain=MS, types={"T": (np.float32,), "F": (np.float32,), "I": _I32, "M": _I32},
                signature=_WHISPER_SIG)
class WhisperBeamSearch(BeamSearch):
    """Beam search over a Whisper encoder (audio features) and decoder: BeamSearch's
    ``model_type=2`` with the decoder prompt as the ``decoder_input_ids`` input. The
    alignment-head outputs (``cross_qk``, ``non_speech_probs``) and the inputs feeding them
    or the timestamp processor (``cross_qk_layer_head``, ``extra_decoding_ids``, a non-zero
    ``logits_processor``) are refused."""

    MODEL_TYPES = (2,)
    MODEL_TYPE_NOTE = "WhisperBeamSearch runs a Whisper encoder and decoder"

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        for index, name in ((12, "cross_qk_layer_head"), (13, "extra_decoding_ids")):
            if info.has_input(index):
                raise InvalidGraph(f"{self.where()}: the {name} input is not supported")
        for index, name in ((3, "cross_qk"), (4, "non_speech_probs")):
            if index < len(info.output_names) and info.output_names[index]:
                raise InvalidGraph(f"{self.where()}: the {name} output is not supported")

    def _processors(self, inputs: tuple[Any, ...], batch: int, vocab: int) -> dict[str, Any]:
        temperature = self._scalar(inputs, 14, 1.0, np.float32)
        if not temperature > 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        return {**super()._processors(inputs, batch, vocab), "temperature": temperature}

    def _process_more(self, scores: np.ndarray, proc: dict[str, Any]) -> None:
        # onnxruntime's temperature processor, after the others, on the log-softmax scores
        if proc["temperature"] != 1.0:
            scores /= proc["temperature"]
