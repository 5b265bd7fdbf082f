package config

// setting is one key pinplan reads, documented where it is declared.
// docs/settings.md is generated from this list and from the defaults and
// accepted values Load applies (TestSettingsReference fails when the two
// differ; `go test ./config -run TestSettingsReference -update` rewrites
// the page). The file takes the same names in lower case.
type setting struct {
	name  string
	group string // the heading it is listed under
	unset string // what an empty default means, for the reference ("generated")
	kind  string // what it accepts, where the loader can only say "text"
	doc   string // Markdown; links are relative to docs/
}

// Groups of settings, in the order the reference lists them.
const (
	groupCore     = "Storage and the HTTP listener"
	groupModel    = "The model"
	groupSlack    = "Slack"
	groupDiscord  = "Discord"
	groupTools    = "Tools and approvals"
	groupContext  = "Context, files and budgets"
	groupReplicas = "Replicas on etcd"
	groupMisc     = "Logging and the demo"
)

// settings lists every setting by its environment name. It is the one list
// for both sources: the file refuses a name not in it, and Load cannot read
// one not in it (the loader panics), so no key is accepted by one source and
// refused by the other.
var settings = []setting{
	{name: "PINPLAN_DB", kind: "a file path", group: groupCore, doc: "the bbolt file (its folder is created); the console's generated token is kept beside it"},
	{name: "PINPLAN_HTTP_ADDR", kind: "`host:port`", group: groupCore, doc: "where the web console, `/healthz`, `/readyz`, `/metrics` and Slack's `/slack/events` are served; a non-loopback address needs `PINPLAN_WEB_TOKEN` set"},
	{name: "PINPLAN_WEB_TOKEN", group: groupCore, unset: "generated", doc: "the console's token; when unset, a random one is generated at first start and kept beside the DB (`<db dir>/web-token`, mode 0600). The console always needs it (`Authorization: Bearer`, `?token=` or its cookie), and the startup line prints the console URL with a generated one (a configured token is never printed). Listening on a non-loopback address needs it set explicitly"},
	{name: "PINPLAN_WEB", group: groupCore, doc: "`off` (or `false`) serves no web console (a Slack-only deployment)"},

	{name: "OPENAI_API_KEY", group: groupModel, doc: "the model server's API key"},
	{name: "OPENAI_BASE_URL", group: groupModel, doc: "any OpenAI-compatible server (Ollama `http://localhost:11434/v1`, vLLM, llama.cpp, OpenRouter, Azure). With neither this nor `OPENAI_API_KEY` set, the console still starts and every message is answered with what to set"},
	{name: "OPENAI_MODEL", group: groupModel, doc: "the model's name on that server"},
	{name: "PINPLAN_STREAM", group: groupModel, doc: "stream model responses (SSE) and show each answer as the model writes it: streamed into Slack threads (`chat.startStream`), posted and edited on Discord, grown live in the console"},
	{name: "PINPLAN_MODEL_TIMEOUT", group: groupModel, doc: "one model request attempt"},
	{name: "PINPLAN_MODEL_RETRIES", group: groupModel, doc: "retries on 429, 5xx, timeouts and broken streams (exponential backoff with jitter, at least `Retry-After`; a `Retry-After` over 30 s ends the turn with the error instead)"},
	{name: "PINPLAN_MODEL_CONCURRENCY", group: groupModel, doc: "model requests in flight at once, whole process"},
	{name: "PINPLAN_MAX_ROUNDS", group: groupModel, doc: "model rounds per turn"},
	{name: "PINPLAN_STALE_ROUNDS", group: groupModel, doc: "tool rounds without `todo_write` before the plan reminder"},
	{name: "PINPLAN_REMINDER_ROLE", group: groupModel, doc: "`user` for servers whose chat templates reject a later system message"},
	{name: "PINPLAN_MODEL_RESPONSE_BYTES", group: groupModel, doc: "the longest model response read, streamed or not; a longer one ends the turn with a message in the thread"},
	{name: "PINPLAN_MODEL_VISION", group: groupModel, doc: "the model takes images: attached PNG, JPEG, GIF and WebP images up to `PINPLAN_FILE_BYTES` are given to it as image parts"},

	{name: "SLACK_BOT_TOKEN", group: groupSlack, doc: "the bot token (`xoxb-...`, OAuth & Permissions); Slack runs when it is set, with `SLACK_APP_TOKEN` or `SLACK_SIGNING_SECRET` (see [Slack](slack.md))"},
	{name: "SLACK_APP_TOKEN", group: groupSlack, doc: "an app-level token (`xapp-...`, scope `connections:write`): Socket Mode"},
	{name: "SLACK_SIGNING_SECRET", group: groupSlack, doc: "the signing secret: the Events API over HTTP on `PINPLAN_HTTP_ADDR` (`/slack/events`), when there is no app token"},
	{name: "SLACK_API_URL", group: groupSlack, doc: "Slack's Web API base URL (the tests point it at a fake)"},
	{name: "PINPLAN_SLACK_PLAN_BLOCKS", group: groupSlack, doc: "Slack's native plan/task-card blocks (falls back to standard Block Kit)"},
	{name: "PINPLAN_SLACK_EDITS_PER_MINUTE", group: groupSlack, doc: "pace of Slack plan posts and edits for the workspace"},
	{name: "SLACK_CLIENT_ID", group: groupSlack, doc: "with `SLACK_CLIENT_SECRET`: install in many workspaces by OAuth v2 (`/slack/install`); each workspace's installation is kept in the store (see [Slack](slack.md#many-workspaces)). Set it instead of `SLACK_BOT_TOKEN`, not beside it: the one-token workspace is installed at `/slack/install` like the others"},
	{name: "SLACK_CLIENT_SECRET", group: groupSlack, doc: "the app's client secret (Basic Information -> App Credentials)"},
	{name: "SLACK_REDIRECT_URL", group: groupSlack, doc: "`https://<your host>/slack/oauth_redirect`, as listed in the app's OAuth & Permissions -> Redirect URLs; needed with `SLACK_CLIENT_ID`"},
	{name: "PINPLAN_SECRET_KEY", group: groupSlack, doc: "at least 32 characters (`openssl rand -base64 32`): seals the installed workspaces' tokens in the store; needed with `SLACK_CLIENT_ID`. Keep it: tokens sealed with another key do not open (reinstall the app then)"},

	{name: "DISCORD_BOT_TOKEN", group: groupDiscord, doc: "the bot token, alone (Developer Portal -> Bot -> Reset Token); Discord runs when it is set (see [Discord](discord.md))"},
	{name: "DISCORD_API_URL", group: groupDiscord, doc: "replaces `https://discord.com` for every REST call and gateway discovery (the tests point it at a fake)"},
	{name: "PINPLAN_DISCORD_THREAD_PER_TASK", group: groupDiscord, doc: "a mention in a text channel opens a public thread from the message, and the session lives there"},
	{name: "PINPLAN_DISCORD_COMPONENTS_V2", group: groupDiscord, doc: "post the plan as one Components V2 container (falls back to an embed if Discord refuses it)"},
	{name: "DISCORD_APPLICATION_ID", group: groupDiscord, doc: "the application's id, for `pinplan invite` when the bot token does not carry it (the token's first part is the id, base64)"},
	{name: "PINPLAN_DISCORD_FORUMS", group: groupDiscord, doc: "forum channel ids (comma separated) whose every new post is a task, mention or not; in other forums a post whose first message mentions the bot is one. The post's tags follow the run (see [Discord](discord.md#forums))"},
	{name: "PINPLAN_DISCORD_SHARDS", group: groupDiscord, doc: "gateway shards; 0 takes the count Discord recommends (`/gateway/bot`). With replicas each shard is held by one of them (see [Replicas](replicas.md))"},
	{name: "PINPLAN_DISCORD_GUILD", group: groupDiscord, doc: "a server (guild) id: `/pinplan` is registered for that server only, where it shows at once, instead of globally"},

	{name: "PINPLAN_TOOL_RESULT_BYTES", group: groupTools, doc: "a longer tool result is cut, with a note saying how much was left out"},
	{name: "PINPLAN_TOOL_TIMEOUT", group: groupTools, doc: "one tool call"},
	{name: "PINPLAN_MCP_STARTUP_TIMEOUT", group: groupTools, doc: "how long a turn that starts while an MCP server is still connecting waits for it; then the turn goes on without that server's tools and the log names it"},
	{name: "PINPLAN_APPROVERS", group: groupTools, doc: "platform user ids (comma separated) who may approve any tool call and stop any turn, besides the person who asked"},
	{name: "PINPLAN_APPROVAL_TIMEOUT", group: groupTools, doc: "an approval card with no decision by then is denied"},
	{name: "PINPLAN_PLAN_APPROVAL", group: groupTools, doc: "`ask`: a turn's first plan is posted with Start and Change, and the agent makes no further model request until the requester, the session's starter or an approver presses Start (ended as stopped after `PINPLAN_APPROVAL_TIMEOUT`); `off`: the agent goes on at once"},

	{name: "PINPLAN_THREAD_CONTEXT", group: groupContext, doc: "earlier thread messages quoted to the model when pinplan is first mentioned in a thread (0: none)"},
	{name: "PINPLAN_CONTEXT_TOKENS", group: groupContext, doc: "the model's context budget for one request; older turns are summarized to stay under it"},
	{name: "PINPLAN_MAX_OUTPUT_TOKENS", group: groupContext, doc: "`max_tokens` of every model request (`max_completion_tokens` once a server refuses `max_tokens`, as OpenAI's reasoning models do); 0 sizes it to 15% of `PINPLAN_CONTEXT_TOKENS`. With a daily budget a request asks for no more than the person has left"},
	{name: "PINPLAN_FILE_BYTES", group: groupContext, doc: "the most an attached text file may be (bytes) to be given to the model; larger ones are described"},
	{name: "PINPLAN_TURN_TOKENS", group: groupContext, doc: "tokens (prompt + completion, as the model's `usage` counts them) one turn may use; a turn whose next request would pass it stops with a message in the thread (0: no budget)"},
	{name: "PINPLAN_USER_TOKENS_PER_DAY", group: groupContext, doc: "tokens one person may use per UTC day, across sessions and replicas; a message over it is answered with the budget and when it resets, and no model request is made (0: no budget)"},
	{name: "PINPLAN_RETENTION", group: groupContext, doc: "delete sessions idle for longer than this (`720h`); `0` keeps them forever (the bbolt file only)"},

	{name: "PINPLAN_ETCD_ENDPOINTS", group: groupReplicas, doc: "comma-separated endpoints: with them the store is on etcd instead of the bbolt file, and several processes share it (see [Replicas](replicas.md))"},
	{name: "PINPLAN_ETCD_PREFIX", group: groupReplicas, doc: "every key lives under it"},
	{name: "PINPLAN_LEASE_TTL", group: groupReplicas, doc: "the replica's lease, whole seconds, at least `2s`: a dead replica's threads move to another after it"},
	{name: "PINPLAN_ETCD_CA", kind: "a file path", group: groupReplicas, doc: "CA file for the cluster's TLS"},
	{name: "PINPLAN_ETCD_CERT", kind: "a file path", group: groupReplicas, doc: "client certificate file (with `PINPLAN_ETCD_KEY`)"},
	{name: "PINPLAN_ETCD_KEY", kind: "a file path", group: groupReplicas, doc: "client key file (with `PINPLAN_ETCD_CERT`)"},
	{name: "PINPLAN_ETCD_USERNAME", group: groupReplicas, doc: "etcd user"},
	{name: "PINPLAN_ETCD_PASSWORD", group: groupReplicas, doc: "etcd password (with `PINPLAN_ETCD_USERNAME`)"},
	{name: "PINPLAN_REPLICA_ID", group: groupReplicas, unset: "hostname-pid", doc: "this replica's name in owner keys and logs"},

	{name: "PINPLAN_LOG_LEVEL", group: groupMisc, doc: "`debug`, `info`, `warn` or `error`"},
	{name: "PINPLAN_DEMO_DELAY", group: groupMisc, doc: "pause per round of the `-demo` model"},
}

// keys are the settings' names, in the order of settings.
var keys = func() []string {
	out := make([]string, len(settings))
	for i, s := range settings {
		out[i] = s.name
	}
	return out
}()
