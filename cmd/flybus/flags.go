package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// newFlagSet returns a flag set that reports nothing itself: parse prints
// errors and help in one place, so every command behaves alike.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parse parses args into fs, accepting flags before, between and after the
// positional arguments (operators type `flybus call SOCK SVC M '{}' --client x`).
// Everything after a "--" is positional. When ok is false the command must
// return code at once: help was printed (0) or the arguments were bad (2).
func parse(c *command, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (pos []string, code int, ok bool) {
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(stdout, c.usage())
				return nil, exitOK, false
			}
			return nil, usageError(c, stderr, flagMessage(err)), false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, exitOK, true
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), exitOK, true
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// printCommand is a command that takes no arguments and no flags and
// prints text, such as version and contract.
func printCommand(name, summary, purpose string, text func() string) *command {
	return &command{
		name:    name,
		summary: summary,
		usage: func() string {
			return usageText("flybus "+name, purpose, newFlagSet(name), "", walkExample(name))
		},
		run: func(c *command, args []string, stdout, stderr io.Writer) int {
			pos, code, ok := parse(c, newFlagSet(name), args, stdout, stderr)
			if !ok {
				return code
			}
			if len(pos) > 0 {
				return usageError(c, stderr, "unexpected argument "+pos[0])
			}
			fmt.Fprint(stdout, text())
			return exitOK
		},
	}
}

// parsePlan parses a command line into set and checks its positional
// arguments with plan. When ok is false the command must return code at
// once: help was printed, or the command line was bad.
func parsePlan[P any](c *command, set *flag.FlagSet, plan func([]string) (P, error), args []string, stdout, stderr io.Writer) (p P, code int, ok bool) {
	pos, code, ok := parse(c, set, args, stdout, stderr)
	if !ok {
		return p, code, false
	}
	p, err := plan(pos)
	if err != nil {
		return p, usageError(c, stderr, err.Error()), false
	}
	return p, exitOK, true
}

// usageError reports bad arguments and where the help is, and returns the
// usage exit status. The whole help would bury the one line that matters.
func usageError(c *command, stderr io.Writer, msg string) int {
	fmt.Fprintf(stderr, "flybus %s: %s\n%s\n", c.name, msg, helpHint(c.name))
	return exitUsage
}

// helpHint is the line after every usage error.
func helpHint(name string) string { return "see flybus " + name + " --help" }

// flagDash finds the single dash the flag package puts before a flag's
// name in its errors; the help and the examples spell flags with two.
var flagDash = regexp.MustCompile(`^(flag provided but not defined: |flag needs an argument: |invalid (?:boolean )?value "(?:[^"\\]|\\.)*" for (?:flag )?)-`)

func flagMessage(err error) string { return flagDash.ReplaceAllString(err.Error(), "${1}--") }

// durationValue is a time.Duration flag whose error says what was meant:
// "--timeout 5" is refused with "did you mean 5s?".
type durationValue time.Duration

func (d *durationValue) String() string { return time.Duration(*d).String() }

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
			return fmt.Errorf("a duration needs a unit; did you mean %ss?", s)
		}
		return errors.New("not a duration; write it like 500ms, 10s or 2m")
	}
	*d = durationValue(v)
	return nil
}

// durationVar defines a duration flag with durationValue's errors.
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*durationValue)(p), name, usage)
}

// usageText renders a command's help: synopsis, purpose, flags (from the
// flag set itself, so the list cannot drift from the code) and examples.
func usageText(synopsis, purpose string, fs *flag.FlagSet, notes, example string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s\n\n%s\n", synopsis, purpose)
	if fs != nil {
		b.WriteString("\nFlags:\n")
		fs.VisitAll(func(f *flag.Flag) {
			kind, text := flag.UnquoteUsage(f)
			head := "  --" + f.Name
			if kind != "" {
				head += " " + kind
			}
			b.WriteString(head + "\n")
			for _, line := range strings.Split(text, "\n") {
				b.WriteString("        " + line + "\n")
			}
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "[]" {
				fmt.Fprintf(&b, "        (default %s)\n", f.DefValue)
			}
		})
		b.WriteString("  -h, --help\n        print this help\n")
	}
	if notes != "" {
		b.WriteString("\n" + notes)
	}
	b.WriteString("\nExample:\n" + example)
	return b.String()
}

// listFlag collects a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }
