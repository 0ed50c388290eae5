package router

// The simulation's model store: staging and seal I/O that completes at a
// later step, files and pool slots. See sim_test.go.

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/flybus/flybus/wire"
)

type simFile uint8

const (
	simStaging simFile = iota + 1
	simSealed
	simFree        // pool mode: a slot no generation uses
	simQuarantined // pool mode: a slot a copying seal left (never reused here)
)

// holdsArtifact reports a file that some artifact must name.
func (f simFile) holdsArtifact() bool { return f == simStaging || f == simSealed }

// completeEffect finishes one staging or seal I/O, maybe failing it.
func (s *sim) completeEffect() bool {
	if len(s.effects) == 0 {
		return false
	}
	outcome := simIOOK
	switch s.rng.IntN(10) {
	case 0:
		outcome = simIOFails
	case 1:
		outcome = simIOMismatch
	}
	s.finishIO(s.rng.IntN(len(s.effects)), outcome)
	return true
}

// simIO is how a store operation ends.
type simIO int

const (
	simIOOK simIO = iota
	simIOFails
	simIOMismatch // seals only; staging just succeeds
)

// finishIO completes pending effect i as the shell would after the store's
// I/O.
func (s *sim) finishIO(i int, outcome simIO) {
	e := s.effects[i]
	s.effects = slices.Delete(s.effects, i, i+1)
	who := s.names[e.conn]
	if s.pool {
		s.finishPoolIO(e, who, outcome)
		return
	}
	switch e.kind {
	case effStage:
		if outcome == simIOFails {
			s.logf("store: staging %s for %s msg-%d fails", e.art.id, who, e.replyTo)
			s.stepCore(input{kind: inStaged, eff: e, err: errors.New("simulated staging failure")})
			return
		}
		s.fileSeq++
		path := fmt.Sprintf("stage-%04x", s.fileSeq)
		s.files[path] = simStaging
		s.logf("store: %s staged at %s for %s msg-%d", e.art.id, path, who, e.replyTo)
		s.stepCore(input{kind: inStaged, eff: e, loc: artLoc{relPath: path, gen: 1}})
	case effSeal:
		if s.files[e.relPath] != simStaging {
			s.fail("files", "seal of %q, which is not a staging file", e.relPath)
		}
		delete(s.files, e.relPath) // whatever the outcome, the staging file is gone
		switch outcome {
		case simIOFails:
			s.logf("store: seal of %s for %s msg-%d fails", e.art.id, who, e.replyTo)
			s.stepCore(input{kind: inSealed, eff: e, err: errors.New("simulated seal failure")})
		case simIOMismatch:
			s.logf("store: seal of %s for %s msg-%d finds a mismatch", e.art.id, who, e.replyTo)
			s.stepCore(input{kind: inSealed, eff: e, mismatch: true, err: errors.New("simulated digest mismatch")})
		default:
			s.fileSeq++
			path := fmt.Sprintf("sealed-%04x", s.fileSeq)
			s.files[path] = simSealed
			s.logf("store: %s sealed at %s for %s msg-%d", e.art.id, path, who, e.replyTo)
			s.stepCore(input{kind: inSealed, eff: e, loc: artLoc{relPath: path, gen: 1}})
		}
	default:
		s.fail("files", "unexpected effect kind %d", e.kind)
	}
}

// finishPoolIO is finishIO for a pooled store: slots are taken from the
// free ones of their size, sealed in place or (now and then) copied into
// another slot that is sealed instead, and recycled on collection.
func (s *sim) finishPoolIO(e effect, who string, outcome simIO) {
	switch e.kind {
	case effStage:
		if outcome == simIOFails {
			s.logf("store: staging for %s msg-%d fails", who, e.replyTo)
			s.stepCore(input{kind: inStaged, eff: e, err: errors.New("simulated staging failure")})
			return
		}
		path := s.takeSlot(uint64(e.size))
		s.logf("store: %s generation %d staged for %s msg-%d", path, s.slotGen[path], who, e.replyTo)
		s.stepCore(input{kind: inStaged, eff: e, loc: s.slotLoc(path)})
	case effSeal:
		if s.files[e.relPath] != simStaging {
			s.fail("slots", "seal of %q, which is not being written", e.relPath)
		}
		switch {
		case outcome != simIOOK:
			s.freeSlot(e.relPath) // the store recycles a slot whose seal failed
			s.logf("store: seal of %s for %s msg-%d fails", e.relPath, who, e.replyTo)
			s.stepCore(input{kind: inSealed, eff: e, mismatch: outcome == simIOMismatch, err: errors.New("simulated seal failure")})
		case s.rng.IntN(5) == 0:
			s.files[e.relPath] = simQuarantined // a writer kept it: copied elsewhere
			path := s.takeSlot(uint64(e.size))
			s.files[path] = simSealed
			s.logf("store: seal of %s copied into %s generation %d for %s msg-%d", e.relPath, path, s.slotGen[path], who, e.replyTo)
			s.stepCore(input{kind: inSealed, eff: e, loc: s.slotLoc(path)})
		default:
			s.files[e.relPath] = simSealed
			s.logf("store: %s sealed in place for %s msg-%d", e.relPath, who, e.replyTo)
			s.stepCore(input{kind: inSealed, eff: e, loc: s.slotLoc(e.relPath)})
		}
	default:
		s.fail("files", "unexpected effect kind %d", e.kind)
	}
}

// takeSlot hands out the slot of size freed last, as the store does, or a
// new one, at its next generation.
func (s *sim) takeSlot(size uint64) string {
	if free := s.freeList[size]; len(free) > 0 {
		path := free[len(free)-1]
		s.freeList[size] = free[:len(free)-1]
		s.files[path] = simStaging
		s.slotGen[path]++
		return path
	}
	s.fileSeq++
	path := fmt.Sprintf("slot-%016x", s.fileSeq)
	s.files[path], s.slotSize[path], s.slotGen[path] = simStaging, size, 1
	return path
}

func (s *sim) slotLoc(path string) artLoc {
	var n uint64
	fmt.Sscanf(path, "slot-%x", &n)
	return artLoc{relPath: path, slot: n, gen: s.slotGen[path]}
}

func (s *sim) freeSlot(path string) {
	s.files[path] = simFree
	size := s.slotSize[path]
	s.freeList[size] = append(s.freeList[size], path)
}

// usePool switches a new simulation to a pooled store.
func (s *sim) usePool() {
	s.pool = true
	s.coreCfg.pool, s.coreCfg.slotShare = true, 5 // small enough that allocations meet it
	s.k = newCore(s.coreCfg)
	s.slotSize, s.slotGen, s.freeList = map[string]uint64{}, map[string]uint64{}, map[uint64][]string{}
}

// simView is a generation of a slot a program may map.
type simView struct {
	path  string
	gen   uint64
	owner string
}

func slotView(ref wire.ArtifactRef, owner string) simView {
	return simView{path: fmt.Sprintf("slot-%016x", uint64(ref.ArtifactID)), gen: ref.Generation, owner: owner}
}

// ownedViews lists the sealed generations ss owns through its deliveries
// and holds, but not those it is letting go of: a program closes its views
// before it consumes or releases.
func (ss *simSession) ownedViews() []simView {
	var vs []simView
	for _, d := range slices.Sorted(maps.Keys(ss.dlvs)) {
		if ss.dlvs[d].consuming > 0 {
			continue
		}
		for _, att := range ss.dlvs[d].atts {
			vs = append(vs, slotView(att.Ref, ss.name))
		}
	}
	for _, n := range slices.Sorted(maps.Keys(ss.holds)) {
		if h := ss.holds[n]; !h.writer && h.releasing == 0 && h.ref.Generation != 0 {
			vs = append(vs, slotView(h.ref, ss.name))
		}
	}
	return vs
}

// keepViews remembers what ss owned when its connection ended: its
// program may go on reading those views for ever.
func (s *sim) keepViews(ss *simSession) {
	if s.pool {
		s.views = append(s.views, ss.ownedViews()...)
	}
}

// checkViews: no slot a program may still map (a dead session's views, a
// live session's deliveries and holds) is free or holds a later generation.
func (s *sim) checkViews() {
	if !s.pool {
		return
	}
	check := func(v simView, how string) {
		f, ok := s.files[v.path]
		if !ok {
			return // retired: the unlinked inode keeps the bytes
		}
		if f == simFree || s.slotGen[v.path] != v.gen {
			s.fail("views", "%s (%s) may map %s generation %d, but the slot is at generation %d (state %d)",
				v.owner, how, v.path, v.gen, s.slotGen[v.path], f)
		}
	}
	for _, v := range s.views {
		check(v, "ended")
	}
	for _, ss := range s.sessions {
		if ss.closing {
			continue // its views are in s.views
		}
		for _, v := range ss.ownedViews() {
			check(v, "live")
		}
	}
}

// filesInUse counts the store's files that hold an artifact.
func (s *sim) filesInUse() int {
	n := 0
	for _, f := range s.files {
		if f.holdsArtifact() {
			n++
		}
	}
	return n
}
