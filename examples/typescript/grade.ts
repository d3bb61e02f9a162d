// Grade a JSON Lines file of grading requests with bonusjudge from TypeScript, through a client
// generated from the service's OpenAPI document (docs/openapi.json), nothing written by hand:
//
//   npm ci   (package.json pins openapi-fetch, openapi-typescript and tsx as tested)
//   npx openapi-typescript http://127.0.0.1:8000/openapi.json -o bonusjudge-api.d.ts
//   npx tsx grade.ts http://127.0.0.1:8000 items.jsonl
//
// Each line of items.jsonl is a GradeRequest (question, reference, bonus_points, response, ...).
// The items are graded twice: at once through POST /v1/grade/batch, then as a background job
// (POST /v1/jobs with a JSON body, polled until done, its results read as JSON Lines). It prints
// one JSON object: {"batch": [...], "job": {"status", "results": [...]}}, a result per item.

import { readFileSync } from "node:fs";
import createClient from "openapi-fetch";
import type { components, paths } from "./bonusjudge-api";

type GradeRequest = components["schemas"]["GradeRequest"];
type BatchEntry = components["schemas"]["BatchEntry"];

/** What the example prints of one graded item. */
interface Row {
  id: string | null | undefined;
  status: string | null;
  coverage: number | null;
  error: string | null;
}

function row(entry: BatchEntry): Row {
  return {
    id: entry.id,
    status: entry.result?.status ?? null,
    coverage: entry.result?.coverage?.coverage ?? null,
    error: entry.error?.message ?? null,
  };
}

async function main(baseUrl: string, file: string): Promise<void> {
  const items: GradeRequest[] = readFileSync(file, "utf8")
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line) as GradeRequest);
  const client = createClient<paths>({ baseUrl });

  // At most the service's max_batch items per call (64 by default); a bad item gets its own error.
  const batch = await client.POST("/v1/grade/batch", { body: { items } });
  if (batch.error !== undefined) throw new Error(`batch: ${batch.error.error.message}`);

  const submitted = await client.POST("/v1/jobs", { body: { items } });
  if (submitted.error !== undefined) throw new Error(`job: ${submitted.error.error.message}`);
  const path = { job_id: submitted.data.id };
  let job = submitted.data;
  while (job.status === "queued" || job.status === "running") {
    await new Promise((resolve) => setTimeout(resolve, 200));
    const polled = await client.GET("/v1/jobs/{job_id}", { params: { path } });
    if (polled.error !== undefined) throw new Error(`job status: ${polled.error.error.message}`);
    job = polled.data;
  }
  // The results are JSON Lines, one BatchEntry per line, in finishing order.
  const results = await client.GET("/v1/jobs/{job_id}/results", {
    params: { path },
    parseAs: "text",
  });
  if (results.error !== undefined) throw new Error(`results: ${results.error.error.message}`);
  const entries = results.data
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line) as BatchEntry);

  const out = {
    batch: batch.data.results.map(row),
    job: { status: job.status, results: entries.map(row) },
  };
  console.log(JSON.stringify(out));
}

const [baseUrl, file] = process.argv.slice(2);
if (baseUrl === undefined || file === undefined) {
  console.error("usage: tsx grade.ts BASE_URL ITEMS.jsonl");
  process.exit(2);
}
main(baseUrl, file).catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
