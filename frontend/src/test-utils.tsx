// Helpers for component tests: a fake REST API and a signed-in page at a URL.
import { render } from "@testing-library/react";
import type { ReactElement } from "react";
import { MemoryRouter, Route, Routes, useLocation } from "react-router";
import { vi } from "vitest";
import type { Me, Tenancy } from "./api";
import { SessionContext } from "./auth";

export type Handler = (body: unknown, url: URL) => [number, unknown];

export interface FakeApi {
  calls: { method: string; url: URL; body: unknown }[];
}

/** [status, body]: an answer with its status; anything else is a 200's body. */
function isAnswer(route: unknown): route is [number, unknown] {
  return Array.isArray(route) && route.length === 2 && typeof route[0] === "number";
}

/** Answer fetch() from `routes`, keyed "METHOD /path/" (the query string is not part of the key). */
export function fakeApi(routes: Record<string, Handler | unknown>): FakeApi {
  const api: FakeApi = { calls: [] };
  vi.stubGlobal(
    "fetch",
    vi.fn(async (input: string, init: RequestInit = {}) => {
      const url = new URL(input, "http://dashboard.test");
      const method = init.method ?? "GET";
      const body = init.body ? JSON.parse(String(init.body)) : undefined;
      api.calls.push({ method, url, body });
      const route = routes[`${method} ${url.pathname}`];
      if (route === undefined) return new Response(JSON.stringify({ detail: "Not found." }), { status: 404 });
      const [status, answer] =
        typeof route === "function"
          ? (route as Handler)(body, url)
          : isAnswer(route)
            ? route
            : [200, route];
      return new Response(status === 204 ? null : JSON.stringify(answer), { status });
    }),
  );
  return api;
}

export const MEMBER: Me = {
  username: "mia",
  email: "mia@example.com",
  is_cluster_admin: false,
  vcs: [{ name: "vision", role: "member" }],
  unix_account: null,
};

export const MULTI_TENANT: Tenancy = { mode: "multi-tenant", message: "Every job runs as its owner's account." };

export let currentLocation = "";

function LocationProbe() {
  const location = useLocation();
  currentLocation = location.pathname + location.search;
  return null;
}

/** Render `element` at `url` for a signed-in `me`, as the route `path`. */
export function renderPage(element: ReactElement, url: string, path = "*", me: Me = MEMBER) {
  return render(
    <SessionContext.Provider value={{ me, tenancy: MULTI_TENANT, signOut: () => undefined }}>
      <MemoryRouter initialEntries={[url]}>
        <LocationProbe />
        <Routes>
          <Route path={path} element={element} />
          <Route path="*" element={<p>elsewhere</p>} />
        </Routes>
      </MemoryRouter>
    </SessionContext.Provider>,
  );
}

export const VISION = {
  name: "vision",
  description: "",
  notification: "",
  policy: "FIFO",
  max_wall_time: 7200,
  interactive_wall_time: 3600,
  max_interactive_gpus: 8,
  default_max_retries: 2,
  user_gpu_limit: null,
  my_role: "member",
  resources: [
    {
      gpu_type: "A100",
      quota: { gpus: 16, cpus: 128, memory: 1048576 },
      used: { gpus: 12, cpus: 96, memory: 786432 },
      queued: { gpus: 8, cpus: 64, memory: 524288 },
      free: { gpus: 4, cpus: 32, memory: 262144 },
      cluster_idle_gpus: 9,
    },
  ],
};

export const A100 = { name: "A100", cpus_per_gpu: 8, memory_per_gpu: 65536 };

export const SUMMARY = {
  gpu_types: [
    {
      gpu_type: "A100",
      nodes: 4,
      schedulable_nodes: 4,
      gpus_total: 32,
      gpus_used: 23,
      gpus_free: 9,
      cpus_total: 256,
      cpus_used: 184,
      memory_total: 2097152,
      memory_used: 1507328,
      fragmentation: [
        { free_gpus: 0, nodes: 1 },
        { free_gpus: 1, nodes: 1 },
        { free_gpus: 2, nodes: 0 },
        { free_gpus: 3, nodes: 2 },
      ],
    },
  ],
};
