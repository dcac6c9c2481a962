package storm

import (
	"fmt"
	"image/color"
	"io"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Chart sizes: the overview on top, then one panel per system, two abreast.
const (
	chartWidth  = 12 * vg.Inch
	topHeight   = 4.5 * vg.Inch
	panelHeight = 2.6 * vg.Inch
)

var (
	outageFill = color.NRGBA{R: 255, G: 190, B: 190, A: 110}
	capColor   = color.Black
)

// WriteChart draws the results as a PNG: on top, the attempts per window of
// every system over time against the server's capacity, the outage (and a
// flapping host's down intervals) shaded; below, one panel per system of
// its attempts against the ones served.
func WriteChart(w io.Writer, res Results) error {
	rows := (len(res.Systems) + 1) / 2
	height := topHeight + vg.Length(rows)*panelHeight
	img := vgimg.New(chartWidth, height)
	dc := draw.New(img)

	xmax := span(res)
	top, err := overview(res, xmax)
	if err != nil {
		return err
	}
	top.Draw(draw.Crop(dc, 0, 0, vg.Length(rows)*panelHeight, 0))

	panels := make([][]*plot.Plot, rows)
	for i := range panels {
		panels[i] = make([]*plot.Plot, 2)
	}
	for i, s := range res.Systems {
		p, err := panel(res.Scenario, s, i, xmax)
		if err != nil {
			return err
		}
		panels[i/2][i%2] = p
	}
	tiles := draw.Tiles{Rows: rows, Cols: 2, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4, PadTop: vg.Millimeter * 4}
	bottom := draw.Crop(dc, 0, 0, 0, -topHeight)
	canvases := plot.Align(panels, tiles, bottom)
	for i := range panels {
		for j, p := range panels[i] {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// modeLabel names a mode in a chart's title.
var modeLabel = map[Mode]string{Open: "open loop", Closed: "closed loop", Collapse: "open loop, collapsing server", Random: "open loop, random failures",
	RetryAfterHerd: "open loop, outage 503s with Retry-After"}

// chartTitle is the overview's title: the fleet's for the fleet modes,
// the one client's for the single-client ones.
func chartTitle(sc Scenario) string {
	switch sc.Mode {
	case Burst:
		return fmt.Sprintf("Attempts per %s at the server (burst: %d goroutines on one client, host down %s–%s shaded)",
			sc.Window, sc.Workers, seconds(sc.OutageStart), seconds(sc.OutageEnd))
	case RandomClosed:
		return fmt.Sprintf("Attempts per %s at the server (%d closed-loop workers on one client, %.0f%% of attempts fail at random)",
			sc.Window, sc.Workers, 100*sc.failRate())
	case Flapping:
		return fmt.Sprintf("Attempts per %s at the server (one client, %.0f req/s open loop, host down every other %s, shaded)",
			sc.Window, sc.Rate, sc.FlapPeriod)
	}
	return fmt.Sprintf("Attempts per %s at the server (%s, %d clients, %.0f req/s offered, outage shaded)",
		sc.Window, modeLabel[sc.Mode], sc.Clients, sc.Rate)
}

// span is the time axis's end: the last window of any system, so that
// every plot of the chart shares one time axis.
func span(res Results) float64 {
	xmax := res.Scenario.Duration.Seconds()
	for _, s := range res.Systems {
		if n := len(s.Windows); n > 0 {
			xmax = max(xmax, (s.Windows[n-1].Start + res.Scenario.Window).Seconds())
		}
	}
	return xmax
}

// overview is the top plot: every system's attempts per window.
func overview(res Results, xmax float64) (*plot.Plot, error) {
	sc := res.Scenario
	p := plot.New()
	p.Title.Text = chartTitle(sc)
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = fmt.Sprintf("attempts per %s", sc.Window)
	p.Legend.Top = true
	ymax := sc.perWindow()
	for _, s := range res.Systems {
		for _, w := range s.Windows {
			ymax = max(ymax, float64(w.Attempts))
		}
	}
	if err := decorate(p, sc, ymax, xmax); err != nil {
		return nil, err
	}
	for i, s := range res.Systems {
		l, err := plotter.NewLine(series(sc, s.Windows, func(w Window) int { return w.Attempts }))
		if err != nil {
			return nil, err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.2)
		p.Add(l)
		p.Legend.Add(s.Name, l)
	}
	return p, nil
}

// panel is one system's plot: its attempts and the ones served.
func panel(sc Scenario, s SystemResult, i int, xmax float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = s.Name
	p.X.Label.Text = "time (s)"
	p.Legend.Top = true
	ymax := sc.perWindow()
	for _, w := range s.Windows {
		ymax = max(ymax, float64(w.Attempts))
	}
	if err := decorate(p, sc, ymax, xmax); err != nil {
		return nil, err
	}
	att, err := plotter.NewLine(series(sc, s.Windows, func(w Window) int { return w.Attempts }))
	if err != nil {
		return nil, err
	}
	att.Color = plotutil.Color(i)
	att.Width = vg.Points(1.2)
	ok, err := plotter.NewLine(series(sc, s.Windows, func(w Window) int { return w.Served }))
	if err != nil {
		return nil, err
	}
	ok.Color = color.RGBA{G: 130, A: 255}
	ok.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
	p.Add(att, ok)
	p.Legend.Add("attempts", att)
	p.Legend.Add("served (200)", ok)
	return p, nil
}

// decorate adds the outage's shading and the capacity line (when the
// server has a capacity), and fixes the axes so that every panel reads
// alike.
func decorate(p *plot.Plot, sc Scenario, ymax, xmax float64) error {
	ymax = max(ymax, 1) * 1.1 // an empty run still gets an axis
	p.Y.Min, p.Y.Max = 0, ymax
	p.X.Min, p.X.Max = 0, xmax
	for _, d := range downSpans(sc) {
		shade, err := plotter.NewPolygon(plotter.XYs{{X: d[0], Y: 0}, {X: d[1], Y: 0}, {X: d[1], Y: ymax}, {X: d[0], Y: ymax}})
		if err != nil {
			return err
		}
		shade.Color = outageFill
		shade.LineStyle.Width = 0
		p.Add(shade)
	}
	if sc.perWindow() <= 0 {
		return nil
	}
	c, err := plotter.NewLine(plotter.XYs{{X: 0, Y: sc.perWindow()}, {X: xmax, Y: sc.perWindow()}})
	if err != nil {
		return err
	}
	c.Color = capColor
	c.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
	p.Add(c)
	p.Legend.Add("capacity", c)
	return nil
}

// downSpans are the spans the chart shades, in seconds: the outage, and
// every down interval of a flapping host.
func downSpans(sc Scenario) [][2]float64 {
	var out [][2]float64
	if sc.OutageEnd > sc.OutageStart {
		out = append(out, [2]float64{sc.OutageStart.Seconds(), sc.OutageEnd.Seconds()})
	}
	if sc.FlapPeriod <= 0 {
		return out
	}
	for t := time.Duration(0); t < sc.Duration; t += 2 * sc.FlapPeriod {
		out = append(out, [2]float64{t.Seconds(), min(t+sc.FlapPeriod, sc.Duration).Seconds()})
	}
	return out
}

// series turns windows into points at each window's middle.
func series(sc Scenario, windows []Window, y func(Window) int) plotter.XYs {
	xys := make(plotter.XYs, len(windows))
	for i, w := range windows {
		xys[i] = plotter.XY{X: (w.Start + sc.Window/2).Seconds(), Y: float64(y(w))}
	}
	return xys
}
