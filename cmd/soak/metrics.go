package main

import (
	"bufio"
	"math"
	"sort"
	"strconv"
	"strings"
)

// scrape is one read of a bot's /metrics (the Prometheus text format):
// every sample by series (the name and its labels but le, sorted), and
// the histograms put together from their _bucket series.
type scrape struct {
	values map[string]float64
	hists  map[string]*histogram
}

// histogram is a Prometheus histogram: cumulative counts under upper
// bounds, the last +Inf.
type histogram struct {
	Bounds []float64 `json:"bounds"`
	Counts []float64 `json:"counts"`
}

// parseMetrics reads the text format. Lines it cannot read are skipped:
// the numbers it reports come from series it knows.
func parseMetrics(text string) scrape {
	s := scrape{values: map[string]float64{}, hists: map[string]*histogram{}}
	type bucket struct{ le, n float64 }
	buckets := map[string][]bucket{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, labels, value, ok := parseSample(line)
		if !ok {
			continue
		}
		le, isBucket := labels["le"]
		delete(labels, "le")
		if base, cut := strings.CutSuffix(name, "_bucket"); cut && isBucket {
			bound, err := strconv.ParseFloat(le, 64)
			if err != nil {
				continue
			}
			key := seriesKey(base, labels)
			buckets[key] = append(buckets[key], bucket{bound, value})
			continue
		}
		s.values[seriesKey(name, labels)] = value
	}
	for key, bs := range buckets {
		sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
		h := &histogram{}
		for _, b := range bs {
			h.Bounds = append(h.Bounds, b.le)
			h.Counts = append(h.Counts, b.n)
		}
		s.hists[key] = h
	}
	return s
}

// parseSample reads `name{k="v",...} value [timestamp]`.
func parseSample(line string) (name string, labels map[string]string, value float64, ok bool) {
	labels = map[string]string{}
	rest := line
	if i := strings.IndexAny(line, "{ "); i < 0 {
		return "", nil, 0, false
	} else {
		name, rest = line[:i], line[i:]
	}
	if strings.HasPrefix(rest, "{") {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, ", ")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, `="`)
			if eq < 0 {
				return "", nil, 0, false
			}
			key := rest[:eq]
			rest = rest[eq+2:]
			var v strings.Builder
			closed := false
			for i := 0; i < len(rest); i++ {
				c := rest[i]
				if c == '\\' && i+1 < len(rest) {
					i++
					switch rest[i] {
					case 'n':
						v.WriteByte('\n')
					default:
						v.WriteByte(rest[i])
					}
					continue
				}
				if c == '"' {
					rest, closed = rest[i+1:], true
					break
				}
				v.WriteByte(c)
			}
			if !closed {
				return "", nil, 0, false
			}
			labels[key] = v.String()
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return "", nil, 0, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return "", nil, 0, false
	}
	return name, labels, v, true
}

// seriesKey names a series: name{a="x",b="y"} with the labels sorted.
func seriesKey(name string, labels map[string]string) string {
	if len(labels) == 0 {
		return name
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + `="` + labels[k] + `"`
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

// sumPrefix adds the values of every series whose key starts with
// prefix: a counter over all its labels.
func (s scrape) sumPrefix(prefix string) float64 {
	total := 0.0
	for k, v := range s.values {
		if k == prefix || strings.HasPrefix(k, prefix+"{") {
			total += v
		}
	}
	return total
}

// histPrefix adds up the histograms of name over all their labels.
func (s scrape) histPrefix(name string) *histogram {
	var out *histogram
	for k, h := range s.hists {
		if k == name || strings.HasPrefix(k, name+"{") {
			out = mergeHist(out, h)
		}
	}
	return out
}

// mergeHist adds b's counts to a's (a nil a is a copy of b). Histograms
// of one metric share their bounds; a bound only one side has is kept
// with the other side's count at the bound below it, as cumulative
// counts go.
func mergeHist(a, b *histogram) *histogram {
	if b == nil {
		return a
	}
	if a == nil {
		return &histogram{Bounds: append([]float64(nil), b.Bounds...), Counts: append([]float64(nil), b.Counts...)}
	}
	bounds := append(append([]float64(nil), a.Bounds...), b.Bounds...)
	sort.Float64s(bounds)
	bounds = uniqFloats(bounds)
	out := &histogram{Bounds: bounds, Counts: make([]float64, len(bounds))}
	for i, le := range bounds {
		out.Counts[i] = a.countAt(le) + b.countAt(le)
	}
	return out
}

func uniqFloats(xs []float64) []float64 {
	out := xs[:0]
	for i, x := range xs {
		if i == 0 || x != xs[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// countAt is the cumulative count at or under le.
func (h *histogram) countAt(le float64) float64 {
	n := 0.0
	for i, b := range h.Bounds {
		if b <= le {
			n = h.Counts[i]
		}
	}
	return n
}

// Total is the number of observations.
func (h *histogram) Total() float64 {
	if h == nil || len(h.Counts) == 0 {
		return 0
	}
	return h.Counts[len(h.Counts)-1]
}

// Quantile estimates the q-quantile as Prometheus's histogram_quantile
// does: linear within the bucket the rank falls in (from 0 for the first
// bucket), the highest finite bound when it falls in +Inf. NaN with no
// observations.
func (h *histogram) Quantile(q float64) float64 {
	total := h.Total()
	if total == 0 {
		return math.NaN()
	}
	rank := q * total
	prevBound, prevCount := 0.0, 0.0
	for i, b := range h.Bounds {
		c := h.Counts[i]
		if c >= rank && c > prevCount {
			if math.IsInf(b, 1) {
				return prevBound
			}
			return prevBound + (b-prevBound)*(rank-prevCount)/(c-prevCount)
		}
		if !math.IsInf(b, 1) {
			prevBound = b
		}
		prevCount = c
	}
	return prevBound
}
