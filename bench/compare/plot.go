package compare

import (
	"cmp"
	"errors"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/flybus/flybus/perf"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// PlotInput is what Plot draws. Any of the three may be nil.
type PlotInput struct {
	Flybus *perf.Report
	// Agents picks the flybus schedule by agent count; -1: the first.
	Agents int
	NATS   *Result
	Direct *Result
}

// stage is one latency histogram of the flybus report.
type stage struct {
	file, title string
	hist        *perf.Hist
}

// flybusStages lists every latency of a perf schedule, in schedule order.
func flybusStages(s *perf.Schedule) []stage {
	return []stage{
		{"allocate", "allocate round trip", s.Allocate},
		{"fill", "producer fill", s.Fill},
		{"seal", "seal round trip", s.Seal},
		{"publish", "publish admission", s.Publish},
		{"delivery-fast", "delivery, fast consumers", s.DeliveryFast},
		{"delivery-slow", "delivery, slow consumer", s.DeliverySlow},
		{"consumer-view", "consumer View call", s.View},
		{"consumer-access", "consumer access (view, touch, close)", s.Access},
		{"rpc", "RPC round trip", s.RPC},
		{"rpc-net", "RPC round trip less handler", s.RPCNet},
		{"agent-access", "agent access", s.AgentAccess},
	}
}

// pickSchedule returns the schedule with the given agent count, or the
// first one when agents is negative.
func pickSchedule(r *perf.Report, agents int) (*perf.Schedule, error) {
	if len(r.Schedules) == 0 {
		return nil, errors.New("flybus report has no schedules")
	}
	if agents < 0 {
		return r.Schedules[0], nil
	}
	for _, s := range r.Schedules {
		if s.Agents == agents {
			return s, nil
		}
	}
	return nil, fmt.Errorf("flybus report has no schedule with %d agents", agents)
}

// Plot writes the PNGs into dir and returns their paths.
func Plot(in PlotInput, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	save := func(p *plot.Plot, name string, w, h vg.Length) error {
		path := filepath.Join(dir, name)
		if err := p.Save(w, h, path); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		files = append(files, path)
		return nil
	}

	var sched *perf.Schedule
	if in.Flybus != nil {
		var err error
		if sched, err = pickSchedule(in.Flybus, in.Agents); err != nil {
			return nil, err
		}
		// One CDF per stage, and all stages on one log axis.
		var all []cdfLine
		for _, st := range flybusStages(sched) {
			ms := samplesMs(st.hist)
			if len(ms) == 0 {
				continue
			}
			line := cdfLine{name: st.title, ms: ms}
			all = append(all, line)
			p, err := cdfPlot(fmt.Sprintf("flybus %s (%d agents)", st.title, sched.Agents), []cdfLine{line}, false)
			if err != nil {
				return nil, err
			}
			if err := save(p, "flybus-stage-"+st.file+"-cdf.png", 6*vg.Inch, 4*vg.Inch); err != nil {
				return nil, err
			}
		}
		if len(all) > 0 {
			p, err := cdfPlot(fmt.Sprintf("flybus latency per stage (%d agents, %s router)", sched.Agents,
				cmp.Or(in.Flybus.Router.Mode, "?")), all, true)
			if err != nil {
				return nil, err
			}
			if err := save(p, "flybus-stages-cdf.png", 9*vg.Inch, 6*vg.Inch); err != nil {
				return nil, err
			}
		}
	}

	// Delivery latency of the three designs.
	var deliv []cdfLine
	add := func(name string, h *perf.Hist) {
		if ms := samplesMs(h); len(ms) > 0 {
			deliv = append(deliv, cdfLine{name: name, ms: ms})
		}
	}
	if sched != nil {
		add("flybus fast", sched.DeliveryFast)
		add("flybus slow", sched.DeliverySlow)
	}
	for _, r := range []*Result{in.NATS, in.Direct} {
		if r != nil {
			add(r.Kind+" fast", r.DeliveryFast)
			add(r.Kind+" slow", r.DeliverySlow)
		}
	}
	if len(deliv) > 0 {
		p, err := cdfPlot("delivery latency, publish to first byte read (fast: consumers 1-2; slow: 40 ms consumer)", deliv, true)
		if err != nil {
			return nil, err
		}
		if err := save(p, "delivery-cdf.png", 9*vg.Inch, 6*vg.Inch); err != nil {
			return nil, err
		}
	}

	// CPU per frame.
	bars := cpuBars(sched, in.NATS, in.Direct)
	if len(bars) > 0 {
		p, err := barPlot("CPU per frame (µs): the process that moves the frames", bars)
		if err != nil {
			return nil, err
		}
		if err := save(p, "cpu-per-frame.png", 8*vg.Inch, 5*vg.Inch); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// bar is one bar of the CPU chart.
type bar struct {
	name string
	us   float64
}

func cpuBars(s *perf.Schedule, n, d *Result) []bar {
	var out []bar
	if s != nil && s.RouterCPU.Err == "" && s.RouterCPU.PerFrameUs > 0 {
		out = append(out, bar{"flybus router", s.RouterCPU.PerFrameUs})
		if s.RouterCPU.NetPerFrameUs > 0 && s.RouterCPU.NetPerFrameUs != s.RouterCPU.PerFrameUs {
			out = append(out, bar{"flybus router\nless sampling", s.RouterCPU.NetPerFrameUs})
		}
	}
	if n != nil && n.CPU.Err == "" {
		out = append(out, bar{"NATS server", n.CPU.PerFrameUs})
	}
	if d != nil && d.CPU.Err == "" {
		out = append(out, bar{"direct producer", d.CPU.PerFrameUs})
	}
	return out
}

// cdfLine is one empirical CDF: latencies in milliseconds.
type cdfLine struct {
	name string
	ms   []float64
}

// samplesMs returns a histogram's samples in milliseconds, sorted.
func samplesMs(h *perf.Hist) []float64 {
	if h == nil {
		return nil
	}
	raw := h.Samples()
	out := make([]float64, len(raw))
	for i, d := range raw {
		out[i] = float64(d) / float64(time.Millisecond)
	}
	slices.Sort(out)
	return out
}

// maxPoints bounds the points of one CDF line.
const maxPoints = 2000

// cdfPoints are the steps of the empirical CDF of sorted ms, at most
// maxPoints of them; on a log axis values are clamped to 1 ns.
func cdfPoints(ms []float64, logX bool) plotter.XYs {
	n := len(ms)
	step := max(1, n/maxPoints)
	var pts plotter.XYs
	for i := 0; i < n; i += step {
		pts = append(pts, plotter.XY{X: ms[i], Y: float64(i+1) / float64(n)})
	}
	if pts[len(pts)-1].Y != 1 {
		pts = append(pts, plotter.XY{X: ms[n-1], Y: 1})
	}
	if logX {
		for i := range pts {
			pts[i].X = max(pts[i].X, 1e-6)
		}
	}
	return pts
}

func cdfPlot(title string, lines []cdfLine, logX bool) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "latency (ms)"
	p.Y.Label.Text = "fraction of samples at or below"
	p.Y.Min, p.Y.Max = 0, 1
	if logX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Add(plotter.NewGrid())
	for i, l := range lines {
		xy, err := plotter.NewLine(cdfPoints(l.ms, logX))
		if err != nil {
			return nil, err
		}
		xy.Color = plotutil.Color(i)
		xy.Width = vg.Points(1.5)
		xy.Dashes = plotutil.Dashes(i / len(plotutil.DefaultColors))
		p.Add(xy)
		p.Legend.Add(fmt.Sprintf("%s (n=%d, p50 %s)", l.name, len(l.ms), fmtMs(l.ms[len(l.ms)/2])), xy)
	}
	// The bottom right of a CDF is the emptiest corner.
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.ThumbnailWidth = vg.Points(20)
	return p, nil
}

func barPlot(title string, bars []bar) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = "CPU µs per frame"
	vals := make(plotter.Values, len(bars))
	names := make([]string, len(bars))
	for i, b := range bars {
		vals[i], names[i] = b.us, b.name
	}
	bc, err := plotter.NewBarChart(vals, vg.Points(50))
	if err != nil {
		return nil, err
	}
	bc.Color = color.RGBA{R: 70, G: 130, B: 180, A: 255}
	bc.LineStyle.Width = 0
	p.Add(plotter.NewGrid(), bc)
	p.NominalX(names...)
	labels := make([]string, len(bars))
	xys := make(plotter.XYs, len(bars))
	for i, b := range bars {
		labels[i] = fmt.Sprintf("%.0f", b.us)
		xys[i] = plotter.XY{X: float64(i), Y: b.us}
	}
	lb, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
	if err != nil {
		return nil, err
	}
	for i := range lb.TextStyle {
		lb.TextStyle[i].XAlign = draw.XCenter
		lb.TextStyle[i].YAlign = draw.YBottom
	}
	p.Add(lb)
	p.Y.Min = 0
	top := slices.MaxFunc(bars, func(a, b bar) int { return cmp.Compare(a.us, b.us) }).us
	p.Y.Max = max(1, top*1.15)
	return p, nil
}

func fmtMs(ms float64) string {
	d := time.Duration(ms * float64(time.Millisecond))
	if d >= time.Second {
		return d.Round(time.Millisecond).String()
	}
	return strings.TrimSpace(d.Round(time.Microsecond).String())
}
