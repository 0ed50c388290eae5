package perf

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// A small line-plot renderer for the sweep's figures: SVG written by hand,
// so that the harness needs no plotting library or external tool.

// plotSeries is one line of a plot. Points whose X or Y cannot be drawn
// (not finite, or not positive on a log axis) are left out and the line
// joins their neighbours.
type plotSeries struct {
	Name string
	X, Y []float64
	// Hollow marks points drawn as open circles (the sweep: where the
	// peer did not keep up); nil for none.
	Hollow []bool
	Dashed bool
	// Color is an SVG color; empty: the palette's, by position.
	Color string
}

// plot is one figure.
type plot struct {
	Title, XLabel, YLabel string
	LogX, LogY            bool
	// XTicks, when set, are the x axis's ticks (the values swept).
	XTicks []float64
	Series []plotSeries
	// Note is a line printed under the legend.
	Note string
}

// The figure's geometry, in SVG user units.
const (
	plotWidth   = 720
	plotHeight  = 420
	plotLeft    = 78
	plotRight   = 520 // the legend sits right of this
	plotTop     = 44
	plotBottom  = 360
	plotLegendX = 536
)

var plotColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

// axis maps data values to one screen coordinate range.
type axis struct {
	log      bool
	lo, hi   float64 // in data units; log axes hold log10 values
	from, to float64 // screen
}

func (a axis) pos(v float64) float64 {
	if a.log {
		v = math.Log10(v)
	}
	if a.hi == a.lo {
		return (a.from + a.to) / 2
	}
	return a.from + (v-a.lo)/(a.hi-a.lo)*(a.to-a.from)
}

// drawable reports whether v can be placed on the axis.
func (a axis) drawable(v float64) bool {
	return !math.IsNaN(v) && !math.IsInf(v, 0) && (!a.log || v > 0)
}

// newAxis fits an axis to values: log axes to whole decades, linear ones
// from zero (or the minimum, if negative) to a round maximum.
func newAxis(values []float64, log bool, from, to float64) axis {
	a := axis{log: log, from: from, to: to}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range values {
		if a.drawable(v) {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 10
	}
	if log {
		a.lo, a.hi = math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if a.hi == a.lo {
			a.hi++
		}
		return a
	}
	a.lo, a.hi = min(0, lo), hi
	if a.hi <= a.lo {
		a.hi = a.lo + 1
	}
	step := niceStep((a.hi - a.lo) / 5)
	a.hi = math.Ceil(a.hi/step) * step
	a.lo = math.Floor(a.lo/step) * step
	return a
}

// tight fits the axis to the values' own range, with a margin, instead
// of whole decades or round steps: for an axis whose ticks are the values
// swept.
func (a axis) tight(values []float64) axis {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range values {
		if a.drawable(v) {
			if a.log {
				v = math.Log10(v)
			}
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	if math.IsInf(lo, 1) {
		return a
	}
	pad := (hi - lo) * 0.06
	if pad == 0 {
		pad = 0.5
	}
	a.lo, a.hi = lo-pad, hi+pad
	return a
}

// niceStep rounds a raw tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*mag {
			return m * mag
		}
	}
	return 10 * mag
}

// ticks lists the axis's tick values: the given ones in range, else
// decades (with 2 and 5 between when there are few) or round steps.
func (a axis) ticks(given []float64) []float64 {
	var out []float64
	if len(given) > 0 {
		for _, v := range given {
			if a.drawable(v) {
				out = append(out, v)
			}
		}
		return out
	}
	if a.log {
		few := a.hi-a.lo <= 2
		for e := a.lo; e <= a.hi; e++ {
			d := math.Pow(10, e)
			out = append(out, d)
			if few && e < a.hi {
				out = append(out, 2*d, 5*d)
			}
		}
		return out
	}
	step := niceStep((a.hi - a.lo) / 5)
	for v := a.lo; v <= a.hi+step/1e6; v += step {
		out = append(out, math.Round(v/step)*step)
	}
	return out
}

// formatTick writes a tick value briefly, to three significant digits:
// 0.5, 64, 1k, 92.2k, 33.2M.
func formatTick(v float64) string {
	short := func(x float64) string {
		r, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 3, 64), 64)
		return strconv.FormatFloat(r, 'f', -1, 64)
	}
	switch abs := math.Abs(v); {
	case abs >= 1e6:
		return short(v/1e6) + "M"
	case abs >= 1e3:
		return short(v/1e3) + "k"
	}
	return short(v)
}

// svgBuilder writes elements with escaped text.
type svgBuilder struct{ b bytes.Buffer }

func (s *svgBuilder) printf(format string, args ...any) { fmt.Fprintf(&s.b, format, args...) }

func (s *svgBuilder) text(x, y float64, anchor, extra, body string) {
	s.printf(`<text x="%.1f" y="%.1f" text-anchor="%s"%s>`, x, y, anchor, extra)
	xml.EscapeText(&s.b, []byte(body))
	s.b.WriteString("</text>\n")
}

// SVG renders the plot: title, axes with ticks and labels, one polyline
// per series that has a drawable point (with a marker per point), and a
// legend naming each of them.
func (p plot) SVG() []byte {
	var xs, ys []float64
	for _, s := range p.Series {
		xs, ys = append(xs, s.X...), append(ys, s.Y...)
	}
	xa := newAxis(append(slices.Clone(xs), p.XTicks...), p.LogX, plotLeft, plotRight)
	if len(p.XTicks) > 0 {
		xa = xa.tight(append(slices.Clone(xs), p.XTicks...))
	}
	ya := newAxis(ys, p.LogY, plotBottom, plotTop)

	var s svgBuilder
	s.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		plotWidth, plotHeight, plotWidth, plotHeight)
	s.printf(`<rect x="0" y="0" width="%d" height="%d" fill="white"/>`+"\n", plotWidth, plotHeight)
	s.text(plotWidth/2, 24, "middle", ` font-size="15" font-weight="bold" class="title"`, p.Title)

	// Grid, ticks and their labels.
	s.printf(`<g class="grid" stroke="#e4e4e4" stroke-width="1">` + "\n")
	xt, yt := xa.ticks(p.XTicks), ya.ticks(nil)
	for _, v := range xt {
		x := xa.pos(v)
		s.printf(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d"/>`+"\n", x, plotTop, x, plotBottom)
	}
	for _, v := range yt {
		y := ya.pos(v)
		s.printf(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`+"\n", plotLeft, y, plotRight, y)
	}
	s.printf("</g>\n")
	s.printf(`<g class="axes" stroke="black" stroke-width="1">`+"\n"+
		`<line x1="%d" y1="%d" x2="%d" y2="%d"/>`+"\n"+`<line x1="%d" y1="%d" x2="%d" y2="%d"/>`+"\n",
		plotLeft, plotBottom, plotRight, plotBottom, plotLeft, plotTop, plotLeft, plotBottom)
	for _, v := range xt {
		x := xa.pos(v)
		s.printf(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d"/>`+"\n", x, plotBottom, x, plotBottom+5)
	}
	for _, v := range yt {
		y := ya.pos(v)
		s.printf(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`+"\n", plotLeft-5, y, plotLeft, y)
	}
	s.printf("</g>\n")
	for _, v := range xt {
		s.text(xa.pos(v), plotBottom+19, "middle", ` class="tick"`, formatTick(v))
	}
	for _, v := range yt {
		s.text(plotLeft-8, ya.pos(v)+4, "end", ` class="tick"`, formatTick(v))
	}
	s.text((plotLeft+plotRight)/2, plotBottom+44, "middle", ` class="xlabel"`, p.XLabel)
	cy := (plotTop + plotBottom) / 2
	s.text(18, float64(cy), "middle", fmt.Sprintf(` class="ylabel" transform="rotate(-90 18 %d)"`, cy), p.YLabel)

	// The series and the legend.
	legendY := float64(plotTop + 8)
	hollowSeen := false
	drawn := 0
	for i, ser := range p.Series {
		var pts []string
		type marker struct {
			x, y   float64
			hollow bool
		}
		var marks []marker
		for j := range min(len(ser.X), len(ser.Y)) {
			x, y := ser.X[j], ser.Y[j]
			if !xa.drawable(x) || !ya.drawable(y) {
				continue
			}
			px, py := xa.pos(x), ya.pos(y)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px, py))
			h := j < len(ser.Hollow) && ser.Hollow[j]
			hollowSeen = hollowSeen || h
			marks = append(marks, marker{px, py, h})
		}
		if len(pts) == 0 {
			continue
		}
		color := ser.Color
		if color == "" {
			color = plotColors[i%len(plotColors)]
		}
		dash := ""
		if ser.Dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		s.printf(`<g class="series" stroke="%s">`+"\n", color)
		s.b.WriteString("<title>")
		xml.EscapeText(&s.b, []byte(ser.Name))
		s.b.WriteString("</title>\n")
		s.printf(`<polyline fill="none" stroke-width="2"%s points="%s"/>`+"\n", dash, strings.Join(pts, " "))
		for _, m := range marks {
			fill := color
			if m.hollow {
				fill = "white"
			}
			s.printf(`<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s" stroke-width="1.5"/>`+"\n", m.x, m.y, fill)
		}
		s.printf("</g>\n")
		s.printf(`<line class="legend-line" x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n",
			plotLegendX, legendY, plotLegendX+22, legendY, color, dash)
		s.text(plotLegendX+28, legendY+4, "start", ` class="legend"`, ser.Name)
		legendY += 18
		drawn++
	}
	if drawn == 0 {
		s.text((plotLeft+plotRight)/2, float64(cy), "middle", ` class="empty"`, "no data")
	}
	note := p.Note
	if hollowSeen {
		note = strings.TrimSpace("open circle: did not keep up. " + note)
	}
	if note != "" {
		legendY += 6
		for _, line := range wrapWords(note, 26) {
			s.text(plotLegendX, legendY, "start", ` class="note" font-size="10" fill="#555"`, line)
			legendY += 13
		}
	}
	s.b.WriteString("</svg>\n")
	return s.b.Bytes()
}

// wrapWords breaks text into lines of at most width characters.
func wrapWords(text string, width int) []string {
	var lines []string
	var cur string
	for w := range strings.FieldsSeq(text) {
		if cur != "" && len(cur)+1+len(w) > width {
			lines = append(lines, cur)
			cur = w
			continue
		}
		if cur != "" {
			cur += " "
		}
		cur += w
	}
	if cur != "" {
		lines = append(lines, cur)
	}
	return lines
}
