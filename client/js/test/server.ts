/** A real HTTP server on loopback standing in for ingest in the Reporter's own tests (the e2e tests use gunicorn). */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export interface Received {
  method: string;
  path: string;
  headers: IncomingMessage["headers"];
  body: Buffer;
}

export interface TestServer {
  url: string;
  received: Received[];
  specs: Map<string, unknown>;
  /** Status to answer the next POSTs with (shifted per request; 202 when empty). */
  statuses: number[];
  /** The Retry-After of a 503, in seconds ("0" unless a test sets it). */
  retryAfter: string;
  close(): Promise<void>;
}

/** Batches of a body: itself (LDPT) or its parts (LDPU). */
export function partsOf(body: Buffer): Buffer[] {
  if (body.subarray(0, 4).toString("latin1") === "LDPT") return [body];
  const count = body.readUInt16LE(6);
  const out: Buffer[] = [];
  let at = 8;
  for (let i = 0; i < count; i++) {
    const len = body.readUInt32LE(at);
    out.push(body.subarray(at + 4, at + 4 + len));
    at += 4 + len;
  }
  return out;
}

export function batchInfo(b: Buffer): { id: string; n: number; metric: string; version: number } {
  const nameLen = b[32] ?? 0;
  return { id: b.subarray(16, 32).toString("hex"), n: b.readUInt32LE(12), version: b.readUInt32LE(8), metric: b.subarray(33, 33 + nameLen).toString("utf8") };
}

export async function startServer(): Promise<TestServer> {
  const received: Received[] = [];
  const specs = new Map<string, unknown>();
  const statuses: number[] = [];
  const self: TestServer = {
    url: "",
    received,
    specs,
    statuses,
    retryAfter: "0",
    close: () => new Promise((r) => server.close(() => r())),
  };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      received.push({ method: req.method ?? "", path: req.url ?? "", headers: req.headers, body });
      res.setHeader("Content-Type", "application/json");
      if (req.method === "GET" && req.url?.startsWith("/v1/metrics/")) {
        const spec = specs.get(decodeURIComponent(req.url.slice("/v1/metrics/".length)));
        res.statusCode = spec ? 200 : 404;
        res.end(JSON.stringify(spec ?? { error: "unknown_metric" }));
        return;
      }
      const status = statuses.shift() ?? 202;
      const parts = partsOf(body);
      if (body.subarray(0, 4).toString("latin1") === "LDPU" && status === 202) {
        res.statusCode = 200;
        res.end(JSON.stringify({ parts: parts.map(() => ({ http_status: 202 })) }));
        return;
      }
      res.statusCode = status;
      if (status === 503) res.setHeader("Retry-After", self.retryAfter);
      res.end(JSON.stringify({ status }));
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  self.url = `http://127.0.0.1:${port}`;
  return self;
}
