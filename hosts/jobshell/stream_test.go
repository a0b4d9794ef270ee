package jobshell

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/gpudispatch/gpudispatch/hosts/spawn"
)

// feedStream writes a job's output, then its end, to s in chunks of the
// given sizes (cycled), and returns what the job's writer got and the
// status the stream handed over.
func feedStream(t testing.TB, s *stream, mark string, wantStatus bool, output []byte, after string, sizes []int) (string, string, bool) {
	var got bytes.Buffer
	end := s.start(&got, mark, wantStatus)
	all := append(append([]byte{}, output...), 0)
	all = append(all, mark...)
	all = append(all, after...)
	for i := 0; len(all) > 0; i++ {
		n := min(max(sizes[i%len(sizes)], 1), len(all))
		if _, err := s.Write(all[:n]); err != nil {
			t.Fatal(err)
		}
		all = all[n:]
	}
	select {
	case st := <-end:
		return got.String(), st, true
	default:
		return got.String(), "", false
	}
}

func TestStreamSplitsAtTheMark(t *testing.T) {
	mark := newMark()
	other := newMark()
	tests := []struct {
		name       string
		output     string
		wantStatus bool
		after      string
		wantEnd    string
	}{
		{name: "empty", output: "", wantStatus: true, after: " 0\n", wantEnd: " 0"},
		{name: "text", output: "epoch 1\nepoch 2\n", wantStatus: true, after: " 3\n", wantEnd: " 3"},
		{name: "no newline at the end", output: "loss 0.1", after: "", wantEnd: ""},
		{name: "NUL and a prefix of the mark", output: "a\x00" + mark[:5] + "b\x00\x00" + mark[:31], wantStatus: true, after: " 1\n", wantEnd: " 1"},
		{name: "another job's mark", output: "\x00" + other + " 0\n", wantStatus: true, after: " 0\n", wantEnd: " 0"},
		{name: "binary", output: string([]byte{0, 1, 2, 255, 0, 0}), after: "", wantEnd: ""},
	}
	for _, tt := range tests {
		for _, sizes := range [][]int{{1}, {2, 3}, {7}, {32, 1}, {1 << 20}} {
			s := &stream{}
			got, end, ended := feedStream(t, s, mark, tt.wantStatus, []byte(tt.output), tt.after, sizes)
			if got != tt.output || !ended || end != tt.wantEnd || s.strayed() {
				t.Errorf("%s, chunks %v: got %q, end %q (%v), stray %v; want %q, end %q",
					tt.name, sizes, got, end, ended, s.strayed(), tt.output, tt.wantEnd)
			}
		}
	}
}

// Bytes between jobs are stray; the next job's output is still its own.
func TestStreamStray(t *testing.T) {
	s := &stream{}
	mark := newMark()
	if _, _, ended := feedStream(t, s, mark, false, []byte("one"), "", []int{4}); !ended || s.strayed() {
		t.Fatalf("first job: ended %v, stray %v", ended, s.strayed())
	}
	s.Write([]byte("late"))
	if !s.strayed() {
		t.Error("bytes between jobs were not noticed")
	}
}

// The stream keeps the job's output whole when a write to the log fails,
// and says so.
func TestStreamWriteError(t *testing.T) {
	s := &stream{}
	mark := newMark()
	end := s.start(failWriter{}, mark, false)
	s.Write([]byte("x\x00" + mark))
	select {
	case <-end:
	default:
		t.Fatal("the end was not found after a failed write")
	}
	if s.writeErr() == nil {
		t.Error("the write error was lost")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func FuzzStream(f *testing.F) {
	f.Add([]byte("hello\n"), uint8(1), uint8(3))
	f.Add([]byte{0, 0, '0', 'a'}, uint8(2), uint8(1))
	f.Add([]byte(strings.Repeat("\x000123456789abcdef", 5)), uint8(5), uint8(7))
	mark := "0123456789abcdef0123456789abcdef"
	f.Fuzz(func(t *testing.T, output []byte, a, b uint8) {
		if bytes.Contains(output, []byte("\x00"+mark)) {
			return // a job cannot know its mark
		}
		s := &stream{}
		got, end, ended := feedStream(t, s, mark, true, output, " 7\n", []int{int(a), int(b)})
		if got != string(output) || !ended || end != " 7" || s.strayed() {
			t.Fatalf("got %q, end %q (%v), stray %v; want %q", got, end, ended, s.strayed(), output)
		}
	})
}

// A new shell's stdout begins with its hello once it is set up: the
// stream takes it in any chunks, says ready, and counts it in no offset;
// a shell that answers without it (it could not be set up) is read as it
// is, and never said ready.
func TestStreamHello(t *testing.T) {
	mark := newMark()
	handed := &State{At: "1764403200123456", Dir: "/home/ada", Vars: "declare -x PATH=\"/opt/bin\"\numask 0027", Saved: "module () \n{ \n    :\n}\n#opts\nset +o errexit\n", Path: "/opt/bin", Odiff: "set -o pipefail\n"}
	withState := hello + " " + string(spawn.Record(handed.At, handed.Dir, handed.Vars, handed.Saved, handed.Path, handed.Odiff))
	tests := []struct {
		name      string
		hello     string
		output    string
		wantReady bool
		wantState *State
	}{
		{name: "hello then output", hello: hello + "\n", output: "epoch 1\n", wantReady: true},
		{name: "hello then nothing", hello: hello + "\n", output: "", wantReady: true},
		{name: "output that begins like the hello", hello: hello + "\n", output: "\x00rea", wantReady: true},
		{name: "a state handed on, then output", hello: withState, output: "epoch 1\n", wantReady: true, wantState: handed},
		{name: "a state handed on, then output like a hello", hello: withState, output: "\x00ready 1 1 1 1 1\n", wantReady: true, wantState: handed},
		{name: "lengths no shell writes: no state", hello: hello + " 000000031 x", output: "epoch 1\n", wantReady: true},
		{name: "an empty part a copy must read: no state", hello: hello + " " + string(spawn.Record("1", "", "1", "1", "", "")), output: "epoch 1\n", wantReady: true},
		{name: "no hello: an answer", hello: "", output: "", wantReady: false},
		{name: "half a hello is output", hello: "", output: "\x00re", wantReady: false},
		{name: "the hello's word, then other bytes, is output", hello: "", output: "\x00ready!", wantReady: false},
	}
	for _, tt := range tests {
		for _, sizes := range [][]int{{1}, {2, 3}, {7}, {1 << 20}} {
			s := newStdout()
			var got bytes.Buffer
			end := s.start(&got, mark, true)
			all := []byte(tt.hello + tt.output + "\x00" + mark + " 0\n")
			for i := 0; len(all) > 0; i++ {
				n := min(sizes[i%len(sizes)], len(all))
				s.Write(all[:n])
				all = all[n:]
			}
			ready := false
			select {
			case <-s.ready:
				ready = true
			default:
			}
			var st string
			select {
			case st = <-end:
			default:
				t.Errorf("%s, chunks %v: no end", tt.name, sizes)
			}
			want := int64(len(tt.output) + 1 + len(mark) + len(" 0\n"))
			if ready != tt.wantReady || got.String() != tt.output || st != " 0" || s.size() != want || s.strayed() {
				t.Errorf("%s, chunks %v: ready %v, got %q, end %q, size %d, stray %v; want ready %v, %q, size %d",
					tt.name, sizes, ready, got.String(), st, s.size(), s.strayed(), tt.wantReady, tt.output, want)
			}
			if st := s.handedState(); !reflect.DeepEqual(st, tt.wantState) {
				t.Errorf("%s, chunks %v: state %+v, want %+v", tt.name, sizes, st, tt.wantState)
			}
		}
	}
}
