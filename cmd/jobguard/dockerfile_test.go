package main

import (
	"bufio"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// No Docker daemon runs where this template is tested, so the image is checked by what it runs:
// the binary built with the Dockerfile's exact `RUN go build` line and ENV, run with the USER's ids
// from a read-only working directory, and the HEALTHCHECK command against it.

// dockerfile is what the test reads from ../../Dockerfile.
type dockerfile struct {
	builder, runtime string            // the two FROM images
	buildEnv         map[string]string // ENV of the build stage
	buildArgs        map[string]string // ARG defaults
	build            []string          // the RUN go build line's words
	runEnv           map[string]string // ENV of the runtime stage
	user             string            // USER uid:gid
	healthcheck      []string          // HEALTHCHECK CMD, exec form
	entrypoint       []string
}

func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	f, err := os.Open("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := dockerfile{buildEnv: map[string]string{}, buildArgs: map[string]string{}, runEnv: map[string]string{}}
	stage := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			t.Fatalf("Dockerfile: keep instructions on one line for this test: %s", line)
		}
		instr, rest, _ := strings.Cut(line, " ")
		switch instr {
		case "FROM":
			stage++
			img := strings.Fields(rest)[0]
			for _, w := range strings.Fields(rest) { // past flags such as --platform=$BUILDPLATFORM
				if !strings.HasPrefix(w, "--") {
					img = w
					break
				}
			}
			if stage == 1 {
				d.builder = img
			} else {
				d.runtime = img
			}
		case "ENV":
			for _, kv := range words(t, rest) {
				k, v, _ := strings.Cut(kv, "=")
				if stage == 1 {
					d.buildEnv[k] = v
				} else {
					d.runEnv[k] = v
				}
			}
		case "ARG":
			k, v, _ := strings.Cut(rest, "=")
			d.buildArgs[k] = v
		case "RUN":
			if w := words(t, rest); len(w) > 1 && w[0] == "go" && w[1] == "build" {
				d.build = w
			}
		case "USER":
			d.user = rest
		case "HEALTHCHECK":
			_, cmd, ok := strings.Cut(rest, "CMD ")
			if !ok || json.Unmarshal([]byte(cmd), &d.healthcheck) != nil {
				t.Fatalf("Dockerfile: HEALTHCHECK must be CMD in exec form (no shell in the image): %s", rest)
			}
		case "ENTRYPOINT":
			if json.Unmarshal([]byte(rest), &d.entrypoint) != nil {
				t.Fatalf("Dockerfile: ENTRYPOINT must be in exec form: %s", rest)
			}
		}
	}
	if d.build == nil || d.user == "" || d.healthcheck == nil || len(d.entrypoint) != 1 {
		t.Fatalf("Dockerfile lacks a RUN go build line, USER, HEALTHCHECK or ENTRYPOINT: %+v", d)
	}
	return d
}

// words splits s as a shell would for the simple lines the Dockerfile uses: blanks outside
// double quotes separate words; the quotes go.
func words(t *testing.T, s string) []string {
	var out []string
	var cur strings.Builder
	quoted, any := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, any = !quoted, true
		case (r == ' ' || r == '\t') && !quoted:
			if any {
				out = append(out, cur.String())
				cur.Reset()
				any = false
			}
		default:
			cur.WriteRune(r)
			any = true
		}
	}
	if quoted {
		t.Fatalf("unbalanced quotes in %q", s)
	}
	if any {
		out = append(out, cur.String())
	}
	return out
}

func TestImageBinaryRunsAsTheDockerfileSays(t *testing.T) {
	t.Parallel()
	d := readDockerfile(t)

	// The Dockerfile's promises, read from it.
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := ""
	for _, l := range strings.Split(string(mod), "\n") {
		if v, ok := strings.CutPrefix(l, "go "); ok {
			goVersion = strings.TrimSpace(v)
		}
	}
	if !strings.HasPrefix(d.builder, "golang:"+goVersion) {
		t.Errorf("builder %s is not golang:%s (go.mod's go line)", d.builder, goVersion)
	}
	// Both images pinned by digest: the tag says what the image is, the digest which one it is.
	for _, img := range []string{d.builder, d.runtime} {
		if !regexp.MustCompile(`@sha256:[0-9a-f]{64}$`).MatchString(img) {
			t.Errorf("image %s is not pinned by its digest", img)
		}
	}
	if runtime, _, _ := strings.Cut(d.runtime, "@"); runtime != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("runtime image %s is not distroless static nonroot", d.runtime)
	}
	line := strings.Join(d.build, " ")
	for _, want := range []string{"-trimpath", "-s -w", "-X github.com/jobguard/jobguard/app.version=${VERSION}", "-X github.com/jobguard/jobguard/app.commit=${COMMIT}"} {
		if !strings.Contains(line, want) {
			t.Errorf("the build line lacks %q: %s", want, line)
		}
	}
	if d.buildEnv["CGO_ENABLED"] != "0" {
		t.Errorf("the build stage does not set CGO_ENABLED=0: %v", d.buildEnv)
	}
	// The release builds the image for amd64 and arm64: the builder cross-compiles rather than run
	// go under emulation.
	_, osArg := d.buildArgs["TARGETOS"]
	_, archArg := d.buildArgs["TARGETARCH"]
	if d.buildEnv["GOOS"] != "${TARGETOS}" || d.buildEnv["GOARCH"] != "${TARGETARCH}" || !osArg || !archArg {
		t.Errorf("the build stage does not build for the target platform (GOOS=${TARGETOS} GOARCH=${TARGETARCH}): %v", d.buildEnv)
	}
	uidS, gidS, _ := strings.Cut(d.user, ":")
	uid, err1 := strconv.Atoi(uidS)
	gid, err2 := strconv.Atoi(gidS)
	if err1 != nil || err2 != nil || uid == 0 || gid == 0 {
		t.Fatalf("USER %q is not a numeric non-root uid:gid", d.user)
	}

	// Build with the exact line: ${VERSION} and ${COMMIT} as build arguments would set them.
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil { // TempDir is 0700: the image's user must reach the binary
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "jobguard")
	const version, commit = "v0.0.0-imagetest", "c0ffee"
	args := make([]string, 0, len(d.build))
	for i := 0; i < len(d.build); i++ {
		w := strings.NewReplacer("${VERSION}", version, "${COMMIT}", commit).Replace(d.build[i])
		if w == "-o" && i+1 < len(d.build) {
			args = append(args, "-o", bin)
			i++
			continue
		}
		args = append(args, w)
	}
	build := exec.Command(args[0], args[1:]...)
	build.Dir = "../.."
	build.Env = os.Environ()
	// The platform arguments as buildx sets them for this machine's platform.
	platform := strings.NewReplacer("${TARGETOS}", runtime.GOOS, "${TARGETARCH}", runtime.GOARCH)
	for k, v := range d.buildEnv {
		build.Env = append(build.Env, k+"="+platform.Replace(v))
	}
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
	checkStaticStripped(t, bin)

	// Run as the image's user from a directory it cannot write.
	ro := filepath.Join(t.TempDir(), "ro")
	if err := os.Mkdir(ro, 0o555); err != nil {
		t.Fatal(err)
	}
	asUser := func(argv ...string) *exec.Cmd {
		if os.Geteuid() == 0 {
			argv = append([]string{"setpriv", "--reuid=" + uidS, "--regid=" + gidS, "--clear-groups", "--"}, argv...)
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = ro
		return cmd
	}
	if os.Geteuid() == 0 {
		if _, err := exec.LookPath("setpriv"); err != nil {
			t.Fatal("setpriv (util-linux) is needed to run the binary as the image's user")
		}
	}
	if probe := asUser("sh", "-c", "touch x"); probe.Run() == nil {
		t.Fatal("the working directory is writable by the image's user")
	}
	out, err := asUser(bin, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), version) || !strings.Contains(string(out), commit) {
		t.Fatalf("jobguard version as %s: %v %q", d.user, err, out)
	}

	// A worker as the image runs it (its ENV, ports made free), and the HEALTHCHECK command.
	redis := redistest.Start(t)
	httpAddr, adminAddr := freeAddr(t), freeAddr(t)
	if d.runEnv["HTTP_ADDR"] == "" || d.runEnv["ADMIN_ADDR"] == "" {
		t.Fatalf("the runtime stage does not set HTTP_ADDR and ADMIN_ADDR: %v", d.runEnv)
	}
	runEnv := []string{"HOME=/nonexistent", "REDIS_URL=redis://" + redis.Addr + "/0", "HTTP_ADDR=" + httpAddr, "ADMIN_ADDR=" + adminAddr, "SHUTDOWN_TIMEOUT=2s"}
	healthcheck := func() (int, string) {
		argv := append([]string{bin}, d.healthcheck[1:]...) // the image's /jobguard is bin here
		cmd := asUser(argv...)
		cmd.Env = runEnv
		out, err := cmd.CombinedOutput()
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				return ee.ExitCode(), string(out)
			}
			t.Fatal(err)
		}
		return 0, string(out)
	}
	if d.healthcheck[0] != d.entrypoint[0] {
		t.Fatalf("HEALTHCHECK runs %s, not the ENTRYPOINT's %s", d.healthcheck[0], d.entrypoint[0])
	}
	if code, _ := healthcheck(); code != 1 {
		t.Fatalf("healthcheck before the worker started: exit %d, want 1", code)
	}
	worker := asUser(bin, "worker")
	worker.Env = runEnv
	logs, _ := worker.StderrPipe()
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { _, _ = io.Copy(io.Discard, logs); exited <- worker.Wait() }()
	t.Cleanup(func() {
		_ = worker.Process.Kill()
		<-exited
	})
	testsupport.Eventually(t, 15*time.Second, "the HEALTHCHECK command exits 0", func() bool {
		code, _ := healthcheck()
		return code == 0
	})
	resp, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf(`commit=%q`, commit); !strings.Contains(string(body), want) {
		t.Errorf("jobguard_build_info lacks %s", want)
	}
	// Stopped (as docker stop does), the healthcheck fails.
	if err := worker.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("worker after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("worker did not stop within 15s of SIGTERM")
	}
	if code, out := healthcheck(); code != 1 {
		t.Fatalf("healthcheck of a stopped worker: exit %d %s, want 1", code, out)
	}
}

// checkStaticStripped: no program interpreter (a static binary runs on distroless static or
// scratch), no symbol table (-s), built with -trimpath and without cgo.
func checkStaticStripped(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has a dynamic loader: not static")
		}
	}
	if f.Section(".symtab") != nil {
		t.Error("the binary has a symbol table: -s did not apply")
	}
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if settings["-trimpath"] != "true" || settings["CGO_ENABLED"] != "0" {
		t.Errorf("build settings: -trimpath=%q CGO_ENABLED=%q", settings["-trimpath"], settings["CGO_ENABLED"])
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
