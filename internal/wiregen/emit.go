package wiregen

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// gen writes the two methods of each body. The output is the code one
// would write by hand: a switch over member names for decoding, and for
// appending a run of appends whose constant parts (keys, punctuation, the
// quotes around bare appenders) are merged into single literals.
type gen struct {
	buf     bytes.Buffer
	strconv bool // the output uses strconv
	lit     []byte
}

func (g *gen) printf(format string, args ...any) { fmt.Fprintf(&g.buf, format, args...) }

func (g *gen) body(b body) {
	g.printf("// %s (%s)\n\n", b.name, b.file)
	g.decoder(b)
	g.appender(b)
}

func (g *gen) decoder(b body) {
	g.printf("func (x *%s) decodeJSON(d *Decoder, ti uint32, ctx string) *BusError {\n", b.name)
	g.printf("f, err := d.object(ti, ctx)\nif err != nil {\nreturn err\n}\n")
	// An absent optional member decodes to its zero value, whatever a
	// reused target held before; opt counts those present.
	optional := false
	for _, fl := range b.fields {
		optional = optional || fl.optional
	}
	if optional {
		g.printf("opt := 0\n")
	}
	for _, fl := range b.fields {
		switch {
		case fl.optional && fl.kind == 'o':
			g.printf("x.%s = Opt[%s]{}\n", fl.goName, fl.typ)
		case fl.optional:
			g.printf("x.%s = x.%s[:0]\n", fl.goName, fl.goName)
		}
	}
	g.printf("for f.next() {\nswitch string(f.key) {\n")
	var keys []string
	for _, fl := range b.fields {
		if !fl.optional {
			keys = append(keys, strconv.Quote(fl.key))
		}
		g.printf("case %q:\n", fl.key)
		if fl.optional {
			g.printf("opt++\n")
		}
		dst := "x." + fl.goName
		switch {
		case fl.kind == 's':
			g.read("f", dst, fl.typ, fl.sc, false)
		case fl.kind == 'o' && fl.optional:
			// Present means a value: an optional member is never null.
			g.printf("var v %s\nv, err = f.%s\n", rawType(fl.typ, fl.sc), fl.sc.read)
			g.printf("%s = Opt[%s]{Valid: err == nil, V: %s}\n", dst, fl.typ, convert(fl.typ, fl.sc, "v"))
		case fl.kind == 'o':
			opt := "Opt[" + fl.typ + "]"
			g.printf("%s = %s{}\nif d.kind(f.val) != KindNull {\n", dst, opt)
			g.printf("var v %s\nv, err = f.%s\n", rawType(fl.typ, fl.sc), fl.sc.read)
			g.printf("%s = %s{Valid: err == nil, V: %s}\n}\n", dst, opt, convert(fl.typ, fl.sc, "v"))
		case fl.kind == 'l':
			g.printf("var first, end uint32\nif first, end, err = f.array(%s, %s); err == nil {\n", fl.lenLo, fl.lenHi)
			g.printf("%s = %s[:0]\n", dst, dst)
			g.printf("for i := first; i < end && err == nil; i = d.nextElem(i) {\ne := f.elem(i)\n")
			g.read("e", dst, fl.typ, fl.sc, true)
			g.printf("}\n}\n")
		case fl.kind == 'n':
			g.printf("err = %s.decodeJSON(d, f.val, d.path(ctx, %q))\n", dst, "."+fl.key)
		}
	}
	g.printf("default:\nerr = f.unknown()\n}\n")
	g.printf("if err != nil {\nreturn err\n}\n}\n")
	if optional {
		g.printf("return f.requireOpt(opt, %s)\n}\n\n", strings.Join(keys, ", "))
	} else {
		g.printf("return f.require(%s)\n}\n\n", strings.Join(keys, ", "))
	}
}

// read reads one scalar through cursor cur into dst, or appends it to the
// slice dst.
func (g *gen) read(cur, dst, typ string, sc scalar, appendTo bool) {
	if sc.raw == "" && !appendTo {
		g.printf("%s, err = %s.%s\n", dst, cur, sc.read)
		return
	}
	g.printf("var v %s\nv, err = %s.%s\n", rawType(typ, sc), cur, sc.read)
	if appendTo {
		g.printf("%s = append(%s, %s)\n", dst, dst, convert(typ, sc, "v"))
	} else {
		g.printf("%s = %s\n", dst, convert(typ, sc, "v"))
	}
}

func rawType(typ string, sc scalar) string {
	if sc.raw != "" {
		return sc.raw
	}
	return typ
}

func convert(typ string, sc scalar, v string) string {
	if sc.raw != "" && sc.raw != typ {
		return typ + "(" + v + ")"
	}
	return v
}

func (g *gen) appender(b body) {
	g.printf("// AppendJSON appends x as a JSON object.\n")
	g.printf("func (x *%s) AppendJSON(b []byte) []byte {\n", b.name)
	for i, fl := range b.fields {
		sep := ","
		if i == 0 {
			sep = "{"
		}
		v := "x." + fl.goName
		if !fl.optional {
			g.lit = append(g.lit, sep+strconv.Quote(fl.key)+":"...)
			g.value(fl, v)
			continue
		}
		// Written only when set; never first, so its comma is its own.
		g.flush()
		if fl.kind == 'o' {
			g.printf("if %s.Valid {\n", v)
			g.lit = append(g.lit, sep+strconv.Quote(fl.key)+":"...)
			g.write(fl.sc, v+".V")
		} else {
			g.printf("if len(%s) > 0 {\n", v)
			g.lit = append(g.lit, sep+strconv.Quote(fl.key)+":"...)
			g.value(fl, v)
		}
		g.flush()
		g.printf("}\n")
	}
	g.lit = append(g.lit, '}')
	g.printf("return append(b, %s)\n}\n\n", g.literal())
}

// value writes one member's value, after its key.
func (g *gen) value(fl field, v string) {
	switch fl.kind {
	case 's':
		g.write(fl.sc, v)
	case 'o':
		g.flush()
		g.printf("if %s.Valid {\n", v)
		g.write(fl.sc, v+".V")
		g.flush()
		g.printf("} else {\nb = append(b, \"null\"...)\n}\n")
	case 'l':
		g.lit = append(g.lit, '[')
		g.flush()
		g.printf("for i, v := range %s {\nif i > 0 {\nb = append(b, ',')\n}\n", v)
		g.write(fl.sc, "v")
		g.flush()
		g.printf("}\n")
		g.lit = append(g.lit, ']')
	case 'n':
		g.flush()
		g.printf("b = %s.AppendJSON(b)\n", v)
	}
}

func (g *gen) write(sc scalar, v string) {
	if sc.quote {
		g.lit = append(g.lit, '"')
	}
	g.flush()
	if strings.HasPrefix(sc.write, "strconv.") {
		g.strconv = true
	}
	g.printf("b = "+sc.write+"\n", v)
	if sc.quote {
		g.lit = append(g.lit, '"')
	}
}

// flush writes the pending literal, if any.
func (g *gen) flush() {
	if len(g.lit) > 0 {
		g.printf("b = append(b, %s)\n", g.literal())
	}
}

// literal returns the pending literal as append's argument and clears it.
func (g *gen) literal() string {
	s := string(g.lit)
	g.lit = g.lit[:0]
	switch {
	case len(s) == 1:
		return strconv.QuoteRune(rune(s[0]))
	case strings.Contains(s, `"`):
		return "`" + s + "`..."
	}
	return strconv.Quote(s) + "..."
}
