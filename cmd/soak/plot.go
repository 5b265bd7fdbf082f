package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"sort"
	"strconv"
)

var (
	black     = color.RGBA{0, 0, 0, 255}
	grey      = color.RGBA{220, 220, 220, 255}
	killRed   = color.RGBA{230, 120, 120, 255}
	slotColor = []color.RGBA{{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {148, 103, 189, 255}, {140, 86, 75, 255}}
)

const (
	plotW, plotH       = 1200, 820
	marginL, marginR   = 100, 30
	panelTop, panelGap = 50, 90
	panelH             = 300
	textScale          = 2
)

// point is one sample of a series: minutes, value.
type point struct{ x, y float64 }

// plot draws RSS (MiB, top) and goroutines (bottom) over minutes of the
// load, one line per slot (broken where a kill ended a run), kills as red
// lines, and writes it as a PNG.
func plot(w io.Writer, samples []sample, events []event) error {
	img := image.NewRGBA(image.Rect(0, 0, plotW, plotH))
	draw.Draw(img, img.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)
	maxX := 1.0
	for _, s := range samples {
		maxX = math.Max(maxX, s.T/60)
	}
	var kills []float64
	for _, e := range events {
		if e.What == "kill" && e.T >= 0 {
			kills = append(kills, e.T/60)
		}
	}
	rss := series(samples, func(s sample) (float64, bool) { return float64(s.RSSKB) / 1024, s.RSSKB > 0 })
	gor := series(samples, func(s sample) (float64, bool) { return float64(s.Goroutines), s.Goroutines >= 0 })
	top := image.Rect(marginL, panelTop, plotW-marginR, panelTop+panelH)
	bottom := image.Rect(marginL, top.Max.Y+panelGap, plotW-marginR, top.Max.Y+panelGap+panelH)
	panel(img, top, "RSS (MIB)", rss, maxX, kills)
	panel(img, bottom, "GOROUTINES", gor, maxX, kills)
	label := "MINUTES OF LOAD"
	drawText(img, (bottom.Min.X+bottom.Max.X-textWidth(label, textScale))/2, bottom.Max.Y+36, label, textScale, black)
	return png.Encode(w, img)
}

// series groups the samples by slot and run, in time order.
func series(samples []sample, value func(sample) (float64, bool)) map[int][][]point {
	type key struct{ slot, run int }
	runs := map[key][]point{}
	for _, s := range samples {
		if v, ok := value(s); ok {
			k := key{s.Slot, s.Run}
			runs[k] = append(runs[k], point{s.T / 60, v})
		}
	}
	out := map[int][][]point{}
	for k, pts := range runs {
		sort.Slice(pts, func(i, j int) bool { return pts[i].x < pts[j].x })
		out[k.slot] = append(out[k.slot], pts)
	}
	return out
}

func panel(img *image.RGBA, r image.Rectangle, title string, lines map[int][][]point, maxX float64, kills []float64) {
	maxY := 1.0
	for _, runs := range lines {
		for _, pts := range runs {
			for _, p := range pts {
				maxY = math.Max(maxY, p.y)
			}
		}
	}
	yStep := niceStep(maxY * 1.1 / 5)
	yTop := math.Ceil(maxY*1.1/yStep) * yStep
	xStep := niceStep(maxX / 8)
	xTop := math.Ceil(maxX/xStep) * xStep
	px := func(x float64) int { return r.Min.X + int(math.Round(x/xTop*float64(r.Dx()))) }
	py := func(y float64) int { return r.Max.Y - int(math.Round(y/yTop*float64(r.Dy()))) }

	for y := 0.0; y <= yTop+yStep/2; y += yStep {
		hline(img, r.Min.X, r.Max.X, py(y), grey)
		l := tickLabel(y, yStep)
		drawText(img, r.Min.X-10-textWidth(l, textScale), py(y)-7, l, textScale, black)
	}
	for x := 0.0; x <= xTop+xStep/2; x += xStep {
		vline(img, px(x), r.Min.Y, r.Max.Y, grey)
		l := tickLabel(x, xStep)
		drawText(img, px(x)-textWidth(l, textScale)/2, r.Max.Y+10, l, textScale, black)
	}
	for _, k := range kills {
		for y := r.Min.Y; y < r.Max.Y; y += 8 {
			vline(img, px(k), y, min(y+4, r.Max.Y), killRed)
		}
	}
	hline(img, r.Min.X, r.Max.X, r.Max.Y, black)
	vline(img, r.Min.X, r.Min.Y, r.Max.Y, black)
	drawText(img, r.Min.X, r.Min.Y-24, title, textScale, black)

	slots := make([]int, 0, len(lines))
	for s := range lines {
		slots = append(slots, s)
	}
	sort.Ints(slots)
	lx := r.Max.X
	for i := len(slots) - 1; i >= 0; i-- {
		s := slots[i]
		c := slotColor[s%len(slotColor)]
		l := fmt.Sprintf("SLOT %d", s)
		lx -= textWidth(l, textScale) + 30
		fill(img, image.Rect(lx, r.Min.Y-22, lx+12, r.Min.Y-10), c)
		drawText(img, lx+18, r.Min.Y-24, l, textScale, black)
		for _, pts := range lines[s] {
			for j := 1; j < len(pts); j++ {
				thickLine(img, px(pts[j-1].x), py(pts[j-1].y), px(pts[j].x), py(pts[j].y), c)
			}
			if len(pts) == 1 {
				fill(img, image.Rect(px(pts[0].x)-1, py(pts[0].y)-1, px(pts[0].x)+2, py(pts[0].y)+2), c)
			}
		}
	}
	if len(kills) > 0 {
		l := "KILL -9"
		lx -= textWidth(l, textScale) + 30
		fill(img, image.Rect(lx, r.Min.Y-22, lx+12, r.Min.Y-10), killRed)
		drawText(img, lx+18, r.Min.Y-24, l, textScale, black)
	}
}

// niceStep rounds raw up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	exp := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*exp >= raw {
			return m * exp
		}
	}
	return 10 * exp
}

func tickLabel(v, step float64) string {
	if step >= 1 {
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	}
	decimals := int(math.Ceil(-math.Log10(step)))
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

func hline(img *image.RGBA, x0, x1, y int, c color.Color) {
	for x := x0; x <= x1; x++ {
		img.Set(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.Color) {
	for y := y0; y <= y1; y++ {
		img.Set(x, y, c)
	}
}

func fill(img *image.RGBA, r image.Rectangle, c color.Color) {
	draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Src)
}

// thickLine draws a two-pixel line (Bresenham, twice).
func thickLine(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	line(img, x0, y0, x1, y1, c)
	line(img, x0, y0+1, x1, y1+1, c)
}

func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := 1, 1
	if x0 > x1 {
		sx = -1
	}
	if y0 > y1 {
		sy = -1
	}
	e := dx + dy
	for {
		img.Set(x0, y0, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
