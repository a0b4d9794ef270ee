package live

import (
	"bytes"
	"io"
	"os"
	"sync"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/gpudispatch/gpudispatch/dispatch"
	"github.com/gpudispatch/gpudispatch/inventory"
)

// View is the live view of a run on a terminal. It implements
// dispatch.Reporter.
type View struct {
	p    *tea.Program
	done chan struct{}
	// lines says which events get a line above the view.
	lines dispatch.TextReporter
	mu    sync.Mutex
	buf   bytes.Buffer // Writer's partial line
	// restore puts the terminal's echo back as it was (echo_unix.go).
	restore func()
}

// Options shape the view.
type Options struct {
	// Verbose prints a line above the view for every start and end too;
	// otherwise only what went wrong gets one.
	Verbose bool
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Opening lists the hosts still being opened as the run starts: shown
	// as connecting until their first host event.
	Opening []string
}

// Start draws the view of a run on inv's hosts on out, a terminal, until
// Stop.
func Start(out io.Writer, inv *inventory.Inventory, o Options) *View {
	if o.Now == nil {
		o.Now = time.Now
	}
	v := &View{done: make(chan struct{}), lines: dispatch.TextReporter{Quiet: !o.Verbose, Verbose: o.Verbose}, restore: func() {}}
	if f, ok := out.(*os.File); ok {
		v.restore = quietControlEcho(f)
	}
	v.p = tea.NewProgram(&program{m: newModel(inv, o.Opening, o.Now)},
		tea.WithOutput(out), tea.WithInput(nil), tea.WithoutSignalHandler(), tea.WithFPS(10))
	go func() {
		defer close(v.done)
		v.p.Run()
	}()
	return v
}

// Report implements dispatch.Reporter.
func (v *View) Report(e dispatch.Event) {
	v.p.Send(eventMsg(e))
	if line, ok := v.lines.Line(e); ok {
		v.println(dispatch.Printable(line))
	}
}

// println prints line above the view. The message goes through the same
// queue as events, so lines keep their order and none is lost at Stop
// (tea.Println as a command would run on a goroutine of its own).
func (v *View) println(line string) { v.p.Send(tea.Println(line)()) }

// Write prints whole lines above the view (gpudispatch's own messages),
// keeping a partial line until its end arrives.
func (v *View) Write(p []byte) (int, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.buf.Write(p)
	for {
		line, err := v.buf.ReadString('\n')
		if err != nil {
			v.buf.WriteString(line) // no newline yet: keep it
			break
		}
		v.println(dispatch.Printable(line[:len(line)-1]))
	}
	return len(p), nil
}

// Stop draws the view a last time, its progress line alone (no slot line
// is left in the scrollback: the run's summary follows), and returns once
// the terminal is the run's again.
func (v *View) Stop() {
	v.p.Send(finalMsg{})
	v.p.Quit()
	<-v.done
	v.restore()
}

type (
	eventMsg dispatch.Event
	tickMsg  time.Time
	finalMsg struct{}
)

// program adapts the model to Bubble Tea.
type program struct{ m *model }

func tick() tea.Cmd {
	return tea.Tick(time.Second, func(t time.Time) tea.Msg { return tickMsg(t) })
}

func (p *program) Init() tea.Cmd { return tick() }

func (p *program) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case eventMsg:
		p.m.apply(dispatch.Event(msg))
	case tickMsg:
		return p, tick() // the elapsed times move on
	case tea.WindowSizeMsg:
		p.m.width, p.m.height = msg.Width, msg.Height
	case finalMsg:
		p.m.final = true
	}
	return p, nil
}

func (p *program) View() string { return p.m.view() }
