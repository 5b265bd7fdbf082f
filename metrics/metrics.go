// Package metrics is pinplan's Prometheus series, served at /metrics: the
// turns (a subscriber to the agent's events), the model's requests, the
// plan boards' and replies' delivery (chat.Hooks), the MCP servers'
// calls, the replica's ownership and the event subscriptions' drops.
// cmd/bot registers them and hands each hook to what it measures.
package metrics

import (
	"context"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/chat"
	"github.com/pinplan/pinplan/etcdstore"
	"github.com/pinplan/pinplan/mcp"
)

// Metrics are pinplan's Prometheus series.
type Metrics struct {
	turns          *prometheus.CounterVec
	rounds         prometheus.Counter
	modelLatency   prometheus.Histogram
	modelErrors    prometheus.Counter
	modelRetries   prometheus.Counter
	renders        *prometheus.CounterVec
	renderErrors   *prometheus.CounterVec
	rateWaits      *prometheus.CounterVec
	revisionToEdit *prometheus.HistogramVec
	replyLatency   *prometheus.HistogramVec
	undelivered    *prometheus.CounterVec
	toolCalls      *prometheus.CounterVec
	toolSeconds    *prometheus.HistogramVec
	mcpUp          *prometheus.GaugeVec
	mcpTools       *prometheus.GaugeVec
	tokens         *prometheus.CounterVec
	budgetStops    *prometheus.CounterVec
	planChanges    *prometheus.CounterVec
}

// SessionCounter counts the stored sessions (pinplan_sessions).
type SessionCounter interface {
	SessionCount() (int, error)
}

// New registers the series on reg, with the Go and process collectors.
func New(reg *prometheus.Registry, db SessionCounter) *Metrics {
	m := &Metrics{
		turns:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pinplan_turns_total", Help: "Turns ended, by outcome."}, []string{"outcome"}),
		rounds:       prometheus.NewCounter(prometheus.CounterOpts{Name: "pinplan_model_rounds_total", Help: "Model requests answered."}),
		modelLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pinplan_model_request_seconds", Help: "Model request latency, retries included.", Buckets: prometheus.ExponentialBuckets(0.05, 2, 12)}),
		modelErrors:  prometheus.NewCounter(prometheus.CounterOpts{Name: "pinplan_model_errors_total", Help: "Model requests that failed after retries (a request cancelled by Stop or shutdown is not counted)."}),
		modelRetries: prometheus.NewCounter(prometheus.CounterOpts{Name: "pinplan_model_retries_total", Help: "Model request retries."}),
		renders:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pinplan_plan_renders_total", Help: "Plan message posts and edits."}, []string{"platform"}),
		renderErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pinplan_plan_render_errors_total", Help: "Plan message posts and edits that failed."}, []string{"platform"}),
		rateWaits:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pinplan_rate_limit_waits_total", Help: "Platform 429s waited out."}, []string{"platform"}),
		revisionToEdit: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pinplan_revision_to_edit_seconds", Help: "Time from a committed plan revision to its edit on the platform.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}, []string{"platform"}),
		replyLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pinplan_reply_delivery_seconds", Help: "Time from an answer to the platform accepting it, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 20)}, []string{"platform"}),
		undelivered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pinplan_replies_undelivered_total", Help: "Replies the platform refused for good or that could not be delivered within 24 hours."}, []string{"platform"}),
		toolCalls:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pinplan_mcp_calls_total", Help: "MCP tool calls, by server, tool and outcome (ok, tool_failed, timeout, tool_unavailable, invalid_arguments, canceled)."}, []string{"server", "tool", "outcome"}),
		toolSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pinplan_mcp_call_seconds", Help: "MCP tool call latency, by server.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}, []string{"server"}),
		mcpUp:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pinplan_mcp_server_up", Help: "1 when the MCP server is connected, 0 when connecting or failed."}, []string{"server"}),
		mcpTools: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pinplan_mcp_tools", Help: "Tools the MCP server offers the model."}, []string{"server"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pinplan_model_tokens_total",
			Help: "Tokens the model server reported in its usage, by kind (prompt, completion); summary calls included. Not per person: the console lists today's."}, []string{"kind"}),
		planChanges: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pinplan_plan_changes_total",
			Help: "People's changes of plans from the pinned message (DESIGN §19), by action: skip, reopen, add, and start (a plan's Start pressed)."}, []string{"action"}),
		budgetStops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pinplan_budget_refusals_total",
			Help: "Turns stopped before a model request by a token budget: turn (PINPLAN_TURN_TOKENS) or day (PINPLAN_USER_TOKENS_PER_DAY, messages refused included)."}, []string{"budget"}),
	}
	// Shown at 0 before the first: an alert on them needs the series.
	for _, kind := range []string{"prompt", "completion"} {
		m.tokens.WithLabelValues(kind)
	}
	for _, budget := range []string{"turn", "day"} {
		m.budgetStops.WithLabelValues(budget)
	}
	for _, action := range []string{"skip", "reopen", "add", "start"} {
		m.planChanges.WithLabelValues(action)
	}
	sessions := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pinplan_sessions", Help: "Sessions in the database."}, func() float64 {
		n, err := db.SessionCount()
		if err != nil {
			return -1
		}
		return float64(n)
	})
	reg.MustRegister(m.turns, m.rounds, m.modelLatency, m.modelErrors, m.modelRetries, m.renders, m.renderErrors, m.rateWaits, m.revisionToEdit, m.replyLatency, m.undelivered, m.toolCalls, m.toolSeconds, m.mcpUp, m.mcpTools, m.tokens, m.budgetStops, m.planChanges, sessions,
		// The process's own: go_goroutines, memory, CPU (the soak reads them).
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

var _ agent.Subscriber = (*Metrics)(nil)

// Observe implements agent.Subscriber: it counts ended turns by outcome,
// and those a token budget stopped.
func (m *Metrics) Observe(e agent.Event) {
	switch {
	case e.Kind == agent.PlanChanged && e.Steer != nil && e.Seq != 0:
		m.planChanges.WithLabelValues(string(e.Steer.Action)).Inc()
	case e.Kind == agent.ApprovalDecided && e.Approval != nil && e.Approval.Plan && e.Decision != nil && e.Decision.Allow:
		m.planChanges.WithLabelValues("start").Inc()
	}
	if e.Kind == agent.TurnEnded {
		m.turns.WithLabelValues(string(e.Outcome)).Inc()
		switch e.Outcome {
		case agent.TurnBudget:
			m.budgetStops.WithLabelValues("turn").Inc()
		case agent.DayBudget:
			m.budgetStops.WithLabelValues("day").Inc()
		}
	}
}

// BoardHooks counts the plan boards' renders, the 429s waited out, and
// times revisions to their edits and replies to their delivery.
func (m *Metrics) BoardHooks() *chat.Hooks {
	return &chat.Hooks{
		Rendered: func(platform string, err error) {
			m.renders.WithLabelValues(platform).Inc()
			if err != nil {
				m.renderErrors.WithLabelValues(platform).Inc()
			}
		},
		RateLimitWait: func(platform string, _ time.Duration) { m.rateWaits.WithLabelValues(platform).Inc() },
		RevisionToEdit: func(platform string, d time.Duration) {
			m.revisionToEdit.WithLabelValues(platform).Observe(d.Seconds())
		},
		Delivered: func(platform string, d time.Duration, _ int) {
			m.replyLatency.WithLabelValues(platform).Observe(d.Seconds())
		},
	}
}

// Undelivered counts a reply the platform refused for good or that could
// not be delivered within a day (chat.Hooks.Undelivered).
func (m *Metrics) Undelivered(platform string) { m.undelivered.WithLabelValues(platform).Inc() }

// ModelRetry counts a model request retried (agent.OpenAIOptions.OnRetry).
func (m *Metrics) ModelRetry() { m.modelRetries.Inc() }

// Timed wraps a model with latency, error and token metrics.
func (m *Metrics) Timed(model agent.Model) agent.Model { return timedModel{model, m} }

type timedModel struct {
	agent.Model
	m *Metrics
}

// Complete implements agent.Model. A request that ends because its turn
// was stopped or the bot is shutting down is neither an error nor a
// latency: an alert on model errors must not fire when people press Stop.
func (t timedModel) Complete(ctx context.Context, req openai.ChatCompletionRequest) (agent.Reply, error) {
	start := time.Now()
	r, err := t.Model.Complete(ctx, req)
	switch {
	case err == nil:
		t.m.modelLatency.Observe(time.Since(start).Seconds())
		t.m.rounds.Inc()
		t.m.tokens.WithLabelValues("prompt").Add(float64(r.Usage.PromptTokens))
		t.m.tokens.WithLabelValues("completion").Add(float64(r.Usage.CompletionTokens))
	case ctx.Err() == nil:
		t.m.modelLatency.Observe(time.Since(start).Seconds())
		t.m.modelErrors.Inc()
	}
	return r, err
}

// MCPHooks feeds the MCP servers' calls and states into the metrics.
func (m *Metrics) MCPHooks() mcp.Hooks {
	return mcp.Hooks{
		Call: func(server, tool, outcome string, took time.Duration) {
			m.toolCalls.WithLabelValues(server, tool, outcome).Inc()
			m.toolSeconds.WithLabelValues(server).Observe(took.Seconds())
		},
		State: func(server, state, _ string) {
			up := 0.0
			if state == mcp.StateReady {
				up = 1
			}
			m.mcpUp.WithLabelValues(server).Set(up)
		},
		Tools: func(server string, offered int) { m.mcpTools.WithLabelValues(server).Set(float64(offered)) },
	}
}

// Replica registers the replica's gauges and counters.
func Replica(reg *prometheus.Registry, rep *etcdstore.Replica) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pinplan_replica_sessions_owned", Help: "Sessions this replica holds."}, func() float64 { return float64(rep.Owned()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "pinplan_replica_takeovers_total", Help: "Sessions this replica took (first messages and failovers)."}, func() float64 { return float64(rep.Takeovers.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "pinplan_replica_fenced_writes_total", Help: "Writes and sends refused because another replica holds the session now."}, func() float64 { return float64(rep.Fenced.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pinplan_replicas", Help: "Live replicas sharing the etcd prefix."}, func() float64 { return float64(rep.Replicas()) }),
	)
}

// Gateway registers pinplan_discord_gateway_leader, whether gw, the
// Discord gateway's elections, are held here (any shard), and
// pinplan_discord_shards_held, how many of its shards are (DESIGN §20).
func Gateway(reg *prometheus.Registry, gw interface {
	Held() bool
	HeldShards() []int
}) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pinplan_discord_gateway_leader",
		Help: "1 while this process holds the Discord gateway (at least one shard): an elected replica, or the only process without etcd."},
		func() float64 {
			if gw.Held() {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pinplan_discord_shards_held",
			Help: "The Discord gateway's shards this process holds."},
			func() float64 { return float64(len(gw.HeldShards())) }))
}

// Dropped registers pinplan_events_dropped_total: the agent's events each
// subscription missed because its buffer was full.
func Dropped(reg *prometheus.Registry, subs ...*agent.Subscription) {
	for _, sub := range subs {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "pinplan_events_dropped_total",
			Help: "Agent events a watcher (the console's run states, the metrics) missed because it fell behind.", ConstLabels: prometheus.Labels{"subscriber": sub.Name()}},
			func() float64 { return float64(sub.Dropped()) }))
	}
}
