package main

import (
	"context"
	"log/slog"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/config"
	"github.com/pinplan/pinplan/demo"
	"github.com/pinplan/pinplan/metrics"
)

// buildModel picks the model: the demo, a real OpenAI-compatible server, or
// (with neither) one that tells the user what to set.
func buildModel(cfg *config.Config, scripted bool, met *metrics.Metrics, log *slog.Logger) (agent.Model, []agent.Tool, string) {
	tools := []agent.Tool{clockTool()}
	switch {
	case scripted:
		return met.Timed(demo.Model{Delay: cfg.DemoDelay}), append(tools, demo.Tools()...), "pinplan-demo"
	case cfg.ModelConfigured:
		model := agent.NewOpenAIModel(agent.OpenAIOptions{
			BaseURL: cfg.OpenAIBaseURL, APIKey: cfg.OpenAIKey.Reveal(), Stream: cfg.Stream,
			Timeout: cfg.ModelTimeout, Retries: cfg.ModelRetries, Concurrency: cfg.ModelConcurrency, ResponseBytes: cfg.ResponseBytes,
			OnRetry: func(attempt int, wait time.Duration, err error) {
				met.ModelRetry()
				log.Warn("model request retry", "attempt", attempt, "wait", wait, "err", err)
			},
		})
		return met.Timed(model), tools, cfg.OpenAIModel
	default:
		return noModel{}, tools, ""
	}
}

// noModel answers every turn with what to configure.
type noModel struct{}

type notConfigured struct{}

func (notConfigured) Error() string { return "no model configured" }

func (notConfigured) UserMessage() string {
	return "No model is configured, so I can't work on this yet. Set OPENAI_API_KEY (and OPENAI_BASE_URL for another OpenAI-compatible server such as Ollama or vLLM) and restart pinplan, or run `go run ./cmd/bot -demo` to watch the built-in demo."
}

func (noModel) Complete(context.Context, openai.ChatCompletionRequest) (agent.Reply, error) {
	return agent.Reply{}, notConfigured{}
}

func clockTool() agent.Tool {
	return agent.Tool{
		Name: "current_time", Description: "Return the current date and time in UTC (RFC 3339).", Idempotent: true,
		Parameters: map[string]any{"type": "object", "properties": map[string]any{}, "additionalProperties": false},
		Run: func(context.Context, *agent.ToolEnv, string) (string, error) {
			return time.Now().UTC().Format(time.RFC3339), nil
		},
	}
}
