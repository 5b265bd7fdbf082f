package metrics

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	openai "github.com/sashabaranov/go-openai"

	"github.com/pinplan/pinplan/agent"
	"github.com/pinplan/pinplan/internal/fakeopenai"
)

// counterValue reads a counter's value.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var out dto.Metric
	if err := c.Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetCounter().GetValue()
}

type noSessions struct{}

func (noSessions) SessionCount() (int, error) { return 0, nil }

// TestStoppedRequestIsNotAModelError: pressing Stop cancels the model
// request; pinplan_model_errors_total ("failed after retries") counts
// only requests that failed, so an alert on it does not fire when people
// press Stop.
func TestStoppedRequestIsNotAModelError(t *testing.T) {
	t.Parallel()
	fake := &fakeopenai.Server{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	m := New(prometheus.NewRegistry(), noSessions{})
	model := m.Timed(agent.NewOpenAIModel(agent.OpenAIOptions{BaseURL: srv.URL + "/v1", APIKey: "sk-test", Timeout: 10 * time.Second, BaseBackoff: time.Millisecond}))
	req := openai.ChatCompletionRequest{Model: "m", Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "hi"}}}

	fake.Fail(fakeopenai.Fault{Delay: 5 * time.Second})
	ctx, stop := context.WithCancelCause(context.Background())
	time.AfterFunc(200*time.Millisecond, func() { stop(agent.ErrStopped) })
	if _, err := model.Complete(ctx, req); err == nil {
		t.Fatal("a stopped request succeeded")
	}
	if got := counterValue(t, m.modelErrors); got != 0 {
		t.Errorf("pinplan_model_errors_total = %v after a stopped request, want 0", got)
	}

	// A request that does fail still counts.
	fake.Fail(fakeopenai.Fault{Status: 401})
	if _, err := model.Complete(context.Background(), req); err == nil {
		t.Fatal("a refused request succeeded")
	}
	if got := counterValue(t, m.modelErrors); got != 1 {
		t.Errorf("pinplan_model_errors_total = %v after a refused request, want 1", got)
	}
}

// TestPlanChangesCounted: pinplan_plan_changes_total counts each person's
// change of a plan once, as logged (not a replay announced again), and a
// plan's Start; not a model's revision, nor a plan not started.
func TestPlanChangesCounted(t *testing.T) {
	m := New(prometheus.NewRegistry(), noSessions{})
	skip := agent.Steer{Action: agent.SteerSkip, Item: "b", By: "ann"}
	plan := agent.Approval{CallID: agent.PlanCallID(1), Plan: true}
	for _, e := range []agent.Event{
		{Kind: agent.PlanChanged, Seq: 4, Steer: &skip},
		{Kind: agent.PlanChanged, Seq: 0, Steer: &skip}, // not logged
		{Kind: agent.PlanChanged, Seq: 5},               // the model's
		{Kind: agent.ApprovalDecided, Seq: 6, Approval: &plan, Decision: &agent.Decision{Allow: true}},
		{Kind: agent.ApprovalDecided, Seq: 7, Approval: &plan, Decision: &agent.Decision{Reason: agent.ReasonTimeout}},
	} {
		m.Observe(e)
	}
	if got := counterValue(t, m.planChanges.WithLabelValues("skip")); got != 1 {
		t.Errorf("skips counted %v, want 1", got)
	}
	if got := counterValue(t, m.planChanges.WithLabelValues("start")); got != 1 {
		t.Errorf("starts counted %v, want 1", got)
	}
}
