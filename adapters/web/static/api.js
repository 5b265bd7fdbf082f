// The console's JSON API.

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// api calls the console's JSON API. State-changing calls send JSON from this
// page's own origin, which is what the server requires. A 401 goes to the
// sign-in page.
export async function api(path, method = "GET", body) {
  const opts = { method, headers: { Accept: "application/json" }, credentials: "same-origin", cache: "no-store" };
  if (method !== "GET") {
    // The console refuses a state-changing request that is not JSON.
    opts.headers["Content-Type"] = "application/json";
    if (body !== undefined) opts.body = JSON.stringify(body);
  }
  let r;
  try {
    r = await fetch(path, opts);
  } catch {
    throw new ApiError(0, "pinplan is not reachable right now.");
  }
  if (r.status === 401) {
    location.assign("/login");
    throw new ApiError(401, "This console needs its token; sign in again.");
  }
  const raw = await r.text().catch(() => "");
  let data = null;
  if (raw) {
    try { data = JSON.parse(raw); } catch { data = null; }
  }
  if (!r.ok) {
    let reason = data && typeof data.error === "string" ? data.error : "";
    if (!reason) reason = r.status === 413 ? "That message is too large to send." : `The request failed (${r.status} ${r.statusText}).`;
    throw new ApiError(r.status, reason);
  }
  return data;
}

export const threadPath = (id) => `/api/threads/${encodeURIComponent(id)}`;
