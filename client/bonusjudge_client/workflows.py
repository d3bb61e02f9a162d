"""Every call the clients make, declared once as a flow (see ``bonusjudge_client.flows``).

``JudgeClient`` and ``AsyncJudgeClient`` both inherit these: on the first each method returns
its result, on the second a coroutine of it (``results`` and ``mcq_results`` return an iterator
and an async iterator). ``grade_many`` and ``grade_stream`` batch on each driver's own
concurrency (a thread pool, tasks), in ``bonusjudge_client.sync`` and ``bonusjudge_client.aio``.
The mixins only group the methods by the part of the service they call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal
from urllib.parse import quote

from bonusjudge_client.answers import (
    Placed,
    entries,
    field_list,
    mcq_response,
    parse,
    place,
    readiness,
    report_dict,
)
from bonusjudge_client.calls import (
    JSON,
    Call,
    FileInput,
    ItemInput,
    JobKind,
    JudgeInput,
    McqInput,
    PairInput,
    as_model,
    batch_call,
    calibrate_call,
    check_offset,
    check_poll,
    dumps,
    estimate_call,
    extract_call,
    grade_call,
    id_path,
    job_call,
    job_path,
    mcq_call,
    mcq_job_call,
    metrics_call,
)
from bonusjudge_client.errors import ClientInputError, ClientResponseError, ClientTimeout
from bonusjudge_client.flows import (
    WAIT_STATUSES,
    Flow,
    FlowCore,
    StreamFlow,
    operation,
    streaming,
)
from bonusjudge_client.progress import progress_bar
from bonusjudge_client.wire.grading import ExtractRequest, ExtractResult, GradeRequest, GradeResult
from bonusjudge_client.wire.mcq import McqSummary
from bonusjudge_client.wire.schemas import (
    BatchEntry,
    CalibrationJob,
    CalibrationMetric,
    EstimateResponse,
    Health,
    JobList,
    JobState,
    JobStatus,
    McqEntry,
    McqResponse,
    MetricsEntry,
    Readiness,
    ReportInfo,
    ReportList,
    RetryUnscoredBody,
    RubricDetail,
    RubricList,
)
from bonusjudge_client.wire.summary import Summary
from bonusjudge_client.wire.usage import UsageReport
from bonusjudge_client.wire.vocab import UnscoredReason


class GradingFlows(FlowCore):
    """Grading, bonus-point extraction and metrics calls."""

    @operation
    def grade(self, request: ItemInput, *, judge: JudgeInput = None) -> Flow[GradeResult]:
        """Grade one response (``POST /v1/grade``).

        Args:
            request: The item, as a ``GradeRequest`` or a mapping of its fields.
            judge: Per-request judge selection (must be allow-listed by the service).

        Raises:
            ClientInputError: ``request`` or ``judge`` is invalid (before any request).
            ClientHTTPError: The service refused it (422 names the field).
        """
        return (yield from self._call_model(grade_call(request, judge), GradeResult))

    @operation
    def grade_batch(
        self, items: Iterable[ItemInput], *, judge: JudgeInput = None
    ) -> Flow[list[BatchEntry]]:
        """Grade a batch in one request (``POST /v1/grade/batch``); one entry per item, in order.

        A failing item does not fail the batch: its entry carries ``error`` instead of
        ``result``. The batch must not exceed the service's ``max_batch`` (default 256); use
        ``grade_many`` for any number of items.
        """
        batch, _ = yield from self._batch(items, judge)
        return sorted(batch, key=lambda e: e.index)

    def _batch(
        self, items: Iterable[ItemInput], judge: JudgeInput, start: int = 0
    ) -> Flow[tuple[list[BatchEntry], Placed]]:
        """One batch request: its entries, and its outcomes placed from input ``start`` on.

        Placing checks that the answer covers each item exactly once.
        """
        call, size = batch_call(items, judge)
        url = self._url(call.path)
        batch = entries((yield from self._call_json(call)), url)
        return batch, place(batch, start, size, url)

    def _chunk(self, start: int, chunk: list[GradeRequest], judge: JudgeInput) -> Flow[Placed]:
        """One ``grade_many`` batch: its outcomes at their input positions."""
        _, placed = yield from self._batch(chunk, judge, start)
        return placed

    @operation
    def estimate(
        self,
        items: Iterable[ItemInput],
        *,
        judge: JudgeInput = None,
        price_in: float | None = None,
        price_out: float | None = None,
    ) -> Flow[EstimateResponse]:
        """What grading ``items`` would cost, with no judge call sent (``POST /v1/estimate``).

        The judge calls the service would make after its cache, their prompt tokens (counted
        with the model's tokenizer), the expected completion tokens and the price, per task and
        in all. Items go as a job's do: ``GradeRequest``s or mappings (CharToM lines too).

        Args:
            items: The items a batch or job would grade.
            judge: Per-request judge selection (must be allow-listed by the service).
            price_in: USD per million prompt tokens, for a model litellm does not price.
            price_out: USD per million completion tokens (with ``price_in``).
        """
        call = estimate_call(items, judge, price_in, price_out)
        return (yield from self._call_model(call, EstimateResponse))

    @operation
    def extract_points(
        self, request: ExtractRequest | Mapping[str, Any], *, judge: JudgeInput = None
    ) -> Flow[ExtractResult]:
        """Split a reference answer into bonus points (``POST /v1/bonus-points``)."""
        return (yield from self._call_model(extract_call(request, judge), ExtractResult))

    @operation
    def metrics(
        self,
        pairs: Iterable[PairInput],
        *,
        metrics: Sequence[Literal["rouge_l", "bertscore"]] | None = None,
        encoder: str | None = None,
    ) -> Flow[list[MetricsEntry]]:
        """ROUGE-L and/or BERTScore of (response, reference) pairs, no judge (``POST /v1/metrics``).

        Args:
            pairs: ``MetricPair``s, mappings of their fields, or ``(response, reference)`` tuples.
            metrics: Which metrics; default both.
            encoder: BERTScore encoder; default the service's.

        Returns:
            One ``MetricsEntry`` per pair, in order.
        """
        call, size = metrics_call(pairs, metrics, encoder)
        url = self._url(call.path)
        data = field_list((yield from self._call_json(call)), "results", url)
        if len(data) != size:
            raise ClientResponseError(
                f"{url} returned {len(data)} results for {size} pairs", url=url, field="results"
            )
        return [parse(MetricsEntry, r, url, f"results.{i}") for i, r in enumerate(data)]


class JobFlows(FlowCore):
    """Grading jobs: submit, watch, stream results, summarise, cancel, retry."""

    @operation
    def submit_job(
        self,
        items: Iterable[ItemInput] | None = None,
        *,
        file: FileInput | None = None,
        judge: JudgeInput = None,
        max_cost: float | None = None,
    ) -> Flow[JobStatus]:
        """Start a grading job (``POST /v1/jobs``); returns its status (202).

        Give ``items`` (sent as JSON; mappings go as they are, so CharToM-format lines work) or
        ``file``, a JSONL path or its bytes, sent as an ``application/x-ndjson`` body (as a
        multipart upload when ``judge`` is given, since a raw body cannot carry it). Bad lines do
        not fail the job: they are counted in ``invalid`` and reported in ``results``.
        ``max_cost``: USD the job's judge calls may cost; at it the job pauses (status
        ``paused``), its items without a result pending.

        Never resent once the request may have reached the service (it would start a second
        job); only a failure to connect is retried.
        """
        return (yield from self._call_model(job_call(items, file, judge, max_cost), JobStatus))

    @operation
    def job(self, job_id: str) -> Flow[JobStatus]:
        """The job's status (``GET /v1/jobs/{id}``); unknown id -> ``ClientHTTPError`` 404."""
        return (yield from self._get(job_path(job_id), JobStatus))

    @operation
    def jobs(
        self, *, status: JobState | None = None, limit: int = 50, offset: int = 0
    ) -> Flow[JobList]:
        """One page of the caller's grading jobs, newest first (``GET /v1/jobs``).

        Args:
            status: Only jobs in this status.
            limit: Jobs per page (1 to 500).
            offset: Skip the N newest first: the previous page's ``next_offset`` (None on the
                last page).
        """
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if status is not None:
            params["status"] = status
        return (yield from self._call_model(Call("GET", "/v1/jobs", params=params), JobList))

    @operation
    def wait(
        self,
        job_id: str,
        *,
        poll_interval: float = 1.0,
        timeout: float | None = None,
        progress: bool = False,
        kind: JobKind = "grade",
    ) -> Flow[JobStatus]:
        """Poll the job until it is done, cancelled, failed or paused; returns that status.

        A failed, cancelled or paused job is returned, not raised: check ``status``. A paused
        job (``status`` ``paused``) reached a cost budget, which its ``detail`` names with the
        spend; its items without a result stay pending and nothing goes on before the budget
        opens again: the key's day budget (``max_cost_per_key_usd``) at the next UTC midnight,
        when the job is queued again (``wait`` for it again then), the job's own ``max_cost``
        never (cancel it and submit its items without a result as a new job).

        Args:
            job_id: The job.
            poll_interval: Seconds between polls.
            timeout: Give up after this many seconds (``ClientTimeout``); None waits forever.
            progress: Show a progress bar of finished items.
            kind: ``grade`` for a grading job, ``mcq`` for a multiple-choice job.
        """
        check_poll(poll_interval, timeout)
        path = job_path(job_id, kind)

        def late(status: JobStatus) -> ClientTimeout:
            return ClientTimeout(
                f"job {job_id} not finished after {timeout} s: {status.status}, "
                f"{status.done}/{status.total} items done",
                url=self._url(path),
            )

        with progress_bar(None, progress, f"job {job_id}") as bar:

            def seen(status: JobStatus) -> None:
                bar.total = status.total
                bar.update(status.done - bar.n)

            return (
                yield from self._poll(
                    lambda: self._get(path, JobStatus), poll_interval, timeout, late, seen,
                    until=WAIT_STATUSES,
                )
            )

    @streaming
    def results(self, job_id: str, *, offset: int = 0) -> StreamFlow[BatchEntry]:
        """Stream the job's finished lines (``GET /v1/jobs/{id}/results``, NDJSON).

        Iterate with ``for`` (``async for`` on ``AsyncJudgeClient``). Partial while the job
        runs. If the connection breaks mid-stream, the stream resumes after the last line
        received (``?offset=``), so no line is lost or repeated.

        Args:
            job_id: The job.
            offset: Skip the first ``offset`` finished lines.
        """
        check_offset(offset)
        return self._lines(job_path(job_id) + "/results", offset, BatchEntry)

    @operation
    def summary(self, job_id: str) -> Flow[Summary]:
        """Aggregates of the job's finished items so far (``GET /v1/jobs/{id}/summary``)."""
        return (yield from self._get(job_path(job_id) + "/summary", Summary))

    @operation
    def cancel(self, job_id: str) -> Flow[JobStatus]:
        """Cancel the job (``DELETE /v1/jobs/{id}``); finished results are kept."""
        return (yield from self._call_model(Call("DELETE", job_path(job_id)), JobStatus))

    @operation
    def retry_unscored(
        self, job_id: str, *, include: Sequence[UnscoredReason] = ()
    ) -> Flow[JobStatus]:
        """Grade a finished job's unscored items again (``POST /v1/jobs/{id}/retry-unscored``).

        Their results leave the stream until graded again: ``wait`` for the job, then read
        ``results`` from offset 0. Items the judge answered (a refusal, an unusable answer)
        are re-sent only when ``include`` names their reason; a job has a limited number of
        passes (409 beyond them), and a pass counts against the key's quotas (429).

        Args:
            job_id: The job.
            include: Reasons such as ``refusal`` whose items are re-sent too.
        """
        path = job_path(job_id) + "/retry-unscored"
        if not include:
            call = Call("POST", path, idempotent=False)
        else:
            body = as_model(RetryUnscoredBody, {"include": list(include)}, "include")
            call = Call("POST", path, dumps(body.model_dump(mode="json")), JSON, idempotent=False)
        return (yield from self._call_model(call, JobStatus))


class McqFlows(FlowCore):
    """Multiple-choice scoring, in one call or as a job."""

    @operation
    def mcq(
        self,
        items: Iterable[McqInput],
        *,
        aggregate: Literal["mean", "majority"] = "mean",
        group_by: Sequence[str] | None = None,
        llm_extract: bool = False,
        fuzzy_threshold: float | None = None,
    ) -> Flow[McqResponse]:
        """Score multiple-choice answers in one call (``POST /v1/mcq``).

        A bad item does not fail the call: its entry carries ``error`` (and it is listed in the
        summary's ``bad_lines``); the others are scored.

        Args:
            items: ``McqItem``s or mappings of their fields (up to the service's
                ``max_job_items``).
            aggregate: How permuted runs of a question combine: ``mean`` or ``majority``.
            group_by: Breakdown fields; default task, ability, tom_dimension, language, tags.
            llm_extract: Let the service's judge read the answers the rules cannot parse.
            fuzzy_threshold: rapidfuzz threshold (0-100; 101 disables); default the service's.

        Returns:
            One entry per item, in input order, and the summary.
        """
        call, size = mcq_call(items, aggregate, group_by, llm_extract, fuzzy_threshold)
        return mcq_response((yield from self._call_json(call)), self._url(call.path), size)

    @operation
    def submit_mcq_job(
        self,
        items: Iterable[McqInput] | None = None,
        *,
        file: FileInput | None = None,
        aggregate: Literal["mean", "majority"] = "mean",
        group_by: Sequence[str] | None = None,
        llm_extract: bool = False,
        fuzzy_threshold: float | None = None,
    ) -> Flow[JobStatus]:
        """Start a multiple-choice job (``POST /v1/mcq/jobs``); returns its status (202).

        Give ``items`` (sent as JSON) or ``file`` (a JSONL path or its bytes, sent as an
        ``application/x-ndjson`` body with the options as query parameters). Follow it with
        ``wait(job_id, kind="mcq")``, ``mcq_results`` and ``mcq_summary``. Never resent once the
        request may have reached the service.
        """
        call = mcq_job_call(items, file, aggregate, group_by, llm_extract, fuzzy_threshold)
        return (yield from self._call_model(call, JobStatus))

    @operation
    def mcq_job(self, job_id: str) -> Flow[JobStatus]:
        """A multiple-choice job's status (``GET /v1/mcq/jobs/{id}``)."""
        return (yield from self._get(job_path(job_id, "mcq"), JobStatus))

    @streaming
    def mcq_results(self, job_id: str, *, offset: int = 0) -> StreamFlow[McqEntry]:
        """Stream a multiple-choice job's finished lines (NDJSON); resumes like ``results``."""
        check_offset(offset)
        return self._lines(job_path(job_id, "mcq") + "/results", offset, McqEntry)

    @operation
    def mcq_summary(self, job_id: str) -> Flow[McqSummary]:
        """Summary of a multiple-choice job's results so far, with its skipped lines."""
        return (yield from self._get(job_path(job_id, "mcq") + "/summary", McqSummary))

    @operation
    def cancel_mcq_job(self, job_id: str) -> Flow[JobStatus]:
        """Cancel a multiple-choice job (``DELETE /v1/mcq/jobs/{id}``)."""
        return (yield from self._call_model(Call("DELETE", job_path(job_id, "mcq")), JobStatus))


class CalibrationFlows(FlowCore):
    """Calibration runs and their stored reports."""

    @operation
    def calibrate(
        self,
        dataset: str | None = None,
        *,
        items: Iterable[Mapping[str, Any]] | None = None,
        name: str | None = None,
        scale: str | None = None,
        judges: Sequence[str] | None = None,
        metrics: Sequence[CalibrationMetric] | None = None,
        limit: int | None = None,
        seed: int = 0,
        resamples: int = 1000,
        retest: bool = False,
    ) -> Flow[CalibrationJob]:
        """Start a calibration run (``POST /v1/calibrate``); returns its job (202).

        Args:
            dataset: A shared set's name or a bundled one (``example``...): the body's ``set``.
            items: Instead of ``dataset``, an uploaded set (calibration or CharToM lines).
            name: Name of an uploaded set in the report.
            scale: Score scale of an uploaded set whose lines lack ``score_scale``.
            judges: Judge models to calibrate (allow-listed); default the service's judge.
            metrics: Any of rouge_l, bertscore, coverage; default all three.
            limit: Use only the first ``limit`` items.
            seed: Seed of the bootstraps and folds.
            resamples: Bootstrap resamples (100 to 2000).
            retest: Grade each judge twice with the cache off (test-retest).
        """
        call = calibrate_call(
            dataset, items, name=name, scale=scale, judges=judges, metrics=metrics, limit=limit,
            seed=seed, resamples=resamples, retest=retest,
        )
        return (yield from self._call_model(call, CalibrationJob))

    @operation
    def calibration_status(self, job_id: str) -> Flow[CalibrationJob]:
        """A calibration run's status (``GET /v1/calibrate/{id}``)."""
        return (yield from self._get(id_path("/v1/calibrate", job_id, "job_id"), CalibrationJob))

    @operation
    def cancel_calibration(self, job_id: str) -> Flow[CalibrationJob]:
        """Cancel a calibration run (``DELETE /v1/calibrate/{id}``); its status says cancelled.

        No judge call of the run starts after this; a finished run is left as it is.
        """
        call = Call("DELETE", id_path("/v1/calibrate", job_id, "job_id"))
        return (yield from self._call_model(call, CalibrationJob))

    @operation
    def wait_calibration(
        self, job_id: str, *, poll_interval: float = 2.0, timeout: float | None = None
    ) -> Flow[CalibrationJob]:
        """Poll a calibration run until it ends; a failed run is returned, not raised."""
        check_poll(poll_interval, timeout)
        path = id_path("/v1/calibrate", job_id, "job_id")

        def late(status: CalibrationJob) -> ClientTimeout:
            return ClientTimeout(
                f"calibration {job_id} not finished after {timeout} s: {status.status}",
                url=self._url(path),
            )

        fetch = lambda: self._get(path, CalibrationJob)  # noqa: E731 - one-line closure
        return (yield from self._poll(fetch, poll_interval, timeout, late))

    @operation
    def reports(self) -> Flow[list[ReportInfo]]:
        """The caller's stored calibration reports, newest first (``GET /v1/reports``)."""
        return (yield from self._get("/v1/reports", ReportList)).reports

    @operation
    def report(self, report_id: str) -> Flow[dict[str, Any]]:
        """A report's ``report.json`` (``GET /v1/reports/{id}``)."""
        path = id_path("/v1/reports", report_id, "report_id")
        return report_dict((yield from self._call_json(Call("GET", path))), self._url(path))

    @operation
    def report_markdown(self, report_id: str) -> Flow[str]:
        """A report as Markdown (``GET /v1/reports/{id}/report.md``)."""
        path = id_path("/v1/reports", report_id, "report_id") + "/report.md"
        return str((yield from self._raw(path, "text/markdown")).text)

    @operation
    def report_file(self, report_id: str, name: str) -> Flow[bytes]:
        """A file of a report (a PNG plot, ``mappings/<metric>.json``...) as bytes."""
        if not isinstance(name, str) or not name.strip():
            raise ClientInputError("name must be a non-empty string", field="name")
        path = id_path("/v1/reports", report_id, "report_id") + "/files/" + quote(name, safe="/")
        return bytes((yield from self._raw(path, "*/*")).content)


class ServiceFlows(FlowCore):
    """The service itself: rubrics, liveness, readiness, metrics."""

    @operation
    def rubrics(self) -> Flow[RubricList]:
        """The service's rubric library (``GET /v1/rubrics``)."""
        return (yield from self._get("/v1/rubrics", RubricList))

    @operation
    def rubric(self, rubric_id: str) -> Flow[RubricDetail]:
        """One rubric with its prompts (``GET /v1/rubrics/{id}``); unknown -> 404."""
        return (yield from self._get(id_path("/v1/rubrics", rubric_id, "rubric_id"), RubricDetail))

    @operation
    def health(self) -> Flow[Health]:
        """Liveness (``GET /healthz``, no auth)."""
        return (yield from self._get("/healthz", Health))

    @operation
    def ready(self) -> Flow[Readiness]:
        """Readiness (``GET /readyz``); a 503 "not ready" answer is returned, not raised."""
        call = Call("GET", "/readyz", retry_statuses=False)
        return readiness((yield from self._send(call)), call, self._url(call.path))

    @operation
    def usage(self) -> Flow[UsageReport]:
        """This key's own usage since the service started (``GET /v1/usage``).

        Provider requests (retries, re-asks and failures included), tokens, cost, cache hits,
        items graded and jobs by status, counted for the caller's key only.
        """
        return (yield from self._get("/v1/usage", UsageReport))

    @operation
    def prometheus(self) -> Flow[str]:
        """The service's Prometheus metrics text (``GET /metrics``)."""
        return str((yield from self._raw("/metrics", "text/plain")).text)


class Workflows(GradingFlows, JobFlows, McqFlows, CalibrationFlows, ServiceFlows):
    """Every call of the service's contract, for either driver."""
