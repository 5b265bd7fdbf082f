// Package deploy holds what installs pinplan beside its source: the
// release build (release.sh), the systemd unit and its env file; the
// Dockerfile and compose.yaml are at the repository's root, where docker
// looks for them. Its tests check each with the tools this machine has:
// the release build is run as the image's build stage runs it and its
// binary inspected and started with the image's settings, the compose
// file is loaded and validated against the compose specification's
// schema by compose-go (what docker compose itself uses), and the unit
// is checked by systemd-analyze verify. docker build, docker run and
// docker compose up need an engine this machine does not run.
package deploy

import (
	"bufio"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/pinplan/pinplan/config"
)

// root is the repository's root, relative to this package.
const root = ".."

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pinplan-deploy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var release struct {
	once sync.Once
	bin  string
	out  []byte
	err  error
}

// releaseBinary runs deploy/release.sh once for the package's tests, as
// the Dockerfile's build stage runs it, in the environment the tests got
// (GOFLAGS=-buildvcs=false included: the script must override it).
func releaseBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the release binary (a minute or two the first time)")
	}
	release.once.Do(func() {
		release.bin = filepath.Join(binDir, "pinplan")
		cmd := exec.Command("deploy/release.sh", release.bin)
		cmd.Dir = root
		release.out, release.err = cmd.CombinedOutput()
	})
	if release.err != nil {
		t.Fatalf("deploy/release.sh: %v\n%s", release.err, release.out)
	}
	return release.bin
}

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd, args string
}

func dockerfile(t *testing.T) (stages [][]instruction) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var cur strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if strings.HasSuffix(trimmed, `\`) {
			cur.WriteString(strings.TrimSuffix(trimmed, `\`) + " ")
			continue
		}
		cur.WriteString(trimmed)
		full := strings.Join(strings.Fields(cur.String()), " ")
		cur.Reset()
		cmd, args, _ := strings.Cut(full, " ")
		in := instruction{strings.ToUpper(cmd), args}
		if in.cmd == "FROM" {
			stages = append(stages, nil)
		}
		if len(stages) == 0 {
			t.Fatalf("Dockerfile: %s before the first FROM", in.cmd)
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], in)
	}
	return stages
}

func find(stage []instruction, cmd string) []string {
	var out []string
	for _, in := range stage {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

// imageEnv is the final stage's ENV, as KEY=value pairs.
func imageEnv(t *testing.T, stage []instruction) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, args := range find(stage, "ENV") {
		for _, kv := range strings.Fields(args) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				t.Fatalf("Dockerfile: ENV %q: write KEY=value", args)
			}
			env[k] = v
		}
	}
	return env
}

// settingNames are the settings of docs/settings.md, the reference that
// config's TestSettingsReference keeps equal to config's own list.
func settingNames(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "settings.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Z0-9_]+)` \\|").FindAllStringSubmatch(string(b), -1) {
		out = append(out, m[1])
	}
	if len(out) < 10 {
		t.Fatalf("docs/settings.md lists %d settings", len(out))
	}
	return out
}

// TestDockerfile checks the image recipe's shape: a build stage that
// runs deploy/release.sh (TestReleaseBuild runs it), a minimal base, a
// non-root user owning /data as a volume, the console on every address
// of the container with no token baked in, and a health check on /readyz
// at the port it listens on.
func TestDockerfile(t *testing.T) {
	stages := dockerfile(t)
	if len(stages) != 2 {
		t.Fatalf("Dockerfile has %d stages, want a build stage and the image", len(stages))
	}
	build, image := stages[0], stages[1]

	from := regexp.MustCompile(`^golang:(1\.(\d+))[-.\w]* AS build$`).FindStringSubmatch(build[0].args)
	if from == nil {
		t.Fatalf("build stage FROM %q, want golang:1.N... AS build", build[0].args)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if want := regexp.MustCompile(`(?m)^go (1\.\d+)`).FindSubmatch(gomod); want == nil || string(want[1]) != from[1] {
		t.Errorf("build stage uses Go %s; go.mod says %q", from[1], want)
	}
	runs := strings.Join(find(build, "RUN"), "\n")
	if !strings.Contains(runs, "deploy/release.sh /out/pinplan") {
		t.Errorf("build stage RUNs %q, want deploy/release.sh /out/pinplan (the recipe TestReleaseBuild runs)", runs)
	}

	base := image[0].args
	if !regexp.MustCompile(`^(alpine:3\.\d+|gcr\.io/distroless/static[-\w]*(:[-\w]+)?|scratch|busybox:[-.\w]+)$`).MatchString(base) {
		t.Errorf("image FROM %q, want a minimal base (alpine, distroless static, busybox)", base)
	}
	user := find(image, "USER")
	if len(user) != 1 || regexp.MustCompile(`^(0|root)(:|$)`).MatchString(user[0]) {
		t.Fatalf("USER %q, want one non-root user", user)
	}
	uid := strings.Split(user[0], ":")[0]
	var bin, data bool
	for _, c := range find(image, "COPY") {
		if strings.HasPrefix(c, "--from=build /out/pinplan /usr/local/bin/pinplan") {
			bin = true
		}
		if strings.HasPrefix(c, "--from=build --chown="+uid+":") && strings.HasSuffix(c, " /data") {
			data = true
		}
	}
	if !bin || !data {
		t.Errorf("COPY %q: want the binary in /usr/local/bin/pinplan and /data owned by the user %s", find(image, "COPY"), uid)
	}
	if v := find(image, "VOLUME"); len(v) != 1 || v[0] != "/data" {
		t.Errorf("VOLUME %q, want /data", v)
	}
	if e := find(image, "ENTRYPOINT"); len(e) != 1 || e[0] != `["/usr/local/bin/pinplan"]` {
		t.Errorf("ENTRYPOINT %q, want the binary", e)
	}
	env := imageEnv(t, image)
	if !strings.HasPrefix(env["PINPLAN_DB"], "/data/") {
		t.Errorf("PINPLAN_DB=%q, want it in the /data volume", env["PINPLAN_DB"])
	}
	addr := env["PINPLAN_HTTP_ADDR"]
	if !strings.HasPrefix(addr, "0.0.0.0:") {
		t.Errorf("PINPLAN_HTTP_ADDR=%q, want 0.0.0.0:PORT: a published port reaches only what listens beyond loopback", addr)
	}
	port := strings.TrimPrefix(addr, "0.0.0.0:")
	if x := find(image, "EXPOSE"); len(x) != 1 || x[0] != port {
		t.Errorf("EXPOSE %q, want %s", x, port)
	}
	hc := find(image, "HEALTHCHECK")
	if len(hc) != 1 || !strings.Contains(hc[0], " CMD ") || !strings.Contains(hc[0], "http://127.0.0.1:"+port+"/readyz") {
		t.Errorf("HEALTHCHECK %q, want a CMD asking http://127.0.0.1:%s/readyz", hc, port)
	}
	for _, in := range append(build, image...) {
		if (in.cmd == "ENV" || in.cmd == "ARG") && strings.Contains(in.args, "TOKEN") || strings.Contains(in.args, "OPENAI_API_KEY=") {
			t.Errorf("%s %s: the image holds no token; give it at run time", in.cmd, in.args)
		}
	}
	names := settingNames(t)
	for k := range env {
		if !slices.Contains(names, k) {
			t.Errorf("ENV %s is no setting (docs/settings.md)", k)
		}
	}
}

// TestReleaseBuild runs the release recipe (the Dockerfile's build stage)
// and checks what it made: a static ELF with no interpreter and no shared
// library, built with -trimpath and without cgo, whose -version names the
// checkout's commit.
func TestReleaseBuild(t *testing.T) {
	bin := releaseBinary(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary names a dynamic loader (PT_INTERP): not static")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v (%v)", libs, err)
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
		t.Errorf("build settings -trimpath=%q CGO_ENABLED=%q, want true and 0", settings["-trimpath"], settings["CGO_ENABLED"])
	}
	if bi.Path != "github.com/pinplan/pinplan/cmd/bot" {
		t.Errorf("main package %s, want cmd/bot", bi.Path)
	}
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v (the tests run in a git checkout)", err)
	}
	rev := strings.TrimSpace(string(head))
	if settings["vcs.revision"] != rev {
		t.Errorf("vcs.revision %q, want HEAD %s", settings["vcs.revision"], rev)
	}
	out, err := exec.Command(bin, "-version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "pinplan ") || !strings.Contains(string(out), "(commit "+rev[:12]) {
		t.Errorf("pinplan -version: %v %q, want the version and commit %s", err, out, rev[:12])
	}
}

// started is a pinplan process and what it printed.
type started struct {
	cmd  *exec.Cmd
	mu   sync.Mutex // guards out
	out  strings.Builder
	url  chan string
	done chan struct{}
}

func (s *started) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

// start runs pinplan with env alone (and PATH) in dir, and reads its
// output for the console line.
func start(t *testing.T, dir string, env map[string]string, argv ...string) *started {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, goEnv(t)...)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s := &started{cmd: cmd, url: make(chan string, 1), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	console := regexp.MustCompile(`web console at (http://[^/\s]+)/`)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			s.mu.Lock()
			s.out.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
			if m := console.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case s.url <- m[1]:
				default:
				}
			}
		}
	}()
	go func() {
		cmd.Wait()
		pw.Close()
		close(s.done)
	}()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
	})
	return s
}

// goEnv is the go command's own settings (its caches among them, which
// live under HOME by default), for ./run's build under another HOME.
func goEnv(t *testing.T) []string {
	t.Helper()
	names := []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOFLAGS", "GOPROXY", "GOTOOLCHAIN"}
	out, err := exec.Command("go", append([]string{"env"}, names...)...).Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	var env []string
	for i, v := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		env = append(env, names[i]+"="+v)
	}
	return env
}

// consoleURL waits for the console line.
func (s *started) consoleURL(t *testing.T, limit time.Duration) string {
	t.Helper()
	select {
	case u := <-s.url:
		return u
	case <-s.done:
		t.Fatalf("pinplan exited before serving: %v\n%s", s.cmd.ProcessState, s.output())
	case <-time.After(limit):
		t.Fatalf("no console line in %v:\n%s", limit, s.output())
	}
	return ""
}

func get(t *testing.T, url, token string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	res.Body.Close()
	return res.StatusCode
}

// TestImageSettings starts the release binary with the image's settings
// (its /data in a temporary folder, the port free): without
// PINPLAN_WEB_TOKEN it refuses to listen beyond loopback, naming the key;
// with it, the health check's /readyz answers without the token and the
// console's API only with it.
func TestImageSettings(t *testing.T) {
	bin := releaseBinary(t)
	env := imageEnv(t, dockerfile(t)[1])
	data := t.TempDir()
	env["PINPLAN_DB"] = filepath.Join(data, strings.TrimPrefix(env["PINPLAN_DB"], "/data/"))
	env["PINPLAN_HTTP_ADDR"] = "0.0.0.0:0" // the image's address, on a free port

	cmd := exec.Command(bin)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "PINPLAN_WEB_TOKEN") {
		t.Fatalf("without a token: %v %q, want a refusal naming PINPLAN_WEB_TOKEN", err, out)
	}

	const token = "image-test-token-0123456789abcdef"
	env["PINPLAN_WEB_TOKEN"] = token
	p := start(t, data, env, bin)
	base := p.consoleURL(t, 30*time.Second)
	base = strings.Replace(base, "localhost", "127.0.0.1", 1)
	deadline := time.Now().Add(30 * time.Second)
	for get(t, base+"/readyz", "") != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never answered 200:\n%s", p.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code := get(t, base+"/api/threads", ""); code != http.StatusUnauthorized {
		t.Errorf("the console's API without the token: %d, want 401", code)
	}
	if code := get(t, base+"/api/threads", token); code != http.StatusOK {
		t.Errorf("the console's API with the token: %d, want 200", code)
	}
	if _, err := os.Stat(env["PINPLAN_DB"]); err != nil {
		t.Errorf("the database is not in the data folder: %v", err)
	}
}

// TestCompose loads compose.yaml as docker compose does (compose-go:
// interpolation, then the compose specification's schema) and checks the
// one-host replica recipe: one etcd of the version the tests run, three
// replicas of the image built here on it, each with its own id, one
// shared console token that must be given, consoles published on
// loopback only, and settings config accepts.
func TestCompose(t *testing.T) {
	dir, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	load := func(env types.Mapping) (*types.Project, error) {
		return loader.LoadWithContext(context.Background(), types.ConfigDetails{
			WorkingDir:  dir,
			ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, "compose.yaml")}},
			Environment: env,
		})
	}
	if _, err := load(types.Mapping{}); err == nil || !strings.Contains(err.Error(), "PINPLAN_WEB_TOKEN") {
		t.Errorf("without PINPLAN_WEB_TOKEN: %v, want an error naming it", err)
	}
	const token = "compose-test-token"
	p, err := load(types.Mapping{"PINPLAN_WEB_TOKEN": token})
	if err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}

	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	etcdVersion := regexp.MustCompile(`go\.etcd\.io/etcd/server/v3 (v[\d.]+)`).FindSubmatch(gomod)
	if etcdVersion == nil {
		t.Fatal("go.mod names no go.etcd.io/etcd/server/v3")
	}
	etcd, ok := p.Services["etcd"]
	if !ok {
		t.Fatal("no etcd service")
	}
	if !strings.HasSuffix(etcd.Image, "/etcd:"+string(etcdVersion[1])) {
		t.Errorf("etcd image %q, want the version the tests run (%s, go.mod)", etcd.Image, etcdVersion[1])
	}
	if etcd.HealthCheck == nil || len(etcd.HealthCheck.Test) == 0 {
		t.Error("etcd has no health check for the replicas to wait on")
	}
	if !slices.Contains(etcd.Command, "--listen-client-urls=http://0.0.0.0:2379") || len(etcd.Ports) > 0 {
		t.Errorf("etcd command %q, ports %v: want clients on 2379 inside the project's network, published nowhere", etcd.Command, etcd.Ports)
	}

	image := imageEnv(t, dockerfile(t)[1])
	names := settingNames(t)
	ids := map[string]bool{}
	replicas := 0
	for name, s := range p.Services {
		if name == "etcd" {
			continue
		}
		replicas++
		if s.Build == nil || s.Build.Context != dir || (s.Build.Dockerfile != "" && s.Build.Dockerfile != "Dockerfile") {
			t.Errorf("%s: build %+v, want the Dockerfile at the root", name, s.Build)
		}
		if d, ok := s.DependsOn["etcd"]; !ok || d.Condition != types.ServiceConditionHealthy {
			t.Errorf("%s: depends_on %v, want etcd healthy", name, s.DependsOn)
		}
		env := map[string]string{}
		maps := []map[string]string{image, env}
		for k, v := range s.Environment {
			if !slices.Contains(names, k) {
				t.Errorf("%s: %s is no setting (docs/settings.md)", name, k)
			}
			if v != nil {
				env[k] = *v
			}
		}
		if env["PINPLAN_ETCD_ENDPOINTS"] != "http://etcd:2379" {
			t.Errorf("%s: PINPLAN_ETCD_ENDPOINTS=%q, want http://etcd:2379", name, env["PINPLAN_ETCD_ENDPOINTS"])
		}
		if env["PINPLAN_WEB_TOKEN"] != token {
			t.Errorf("%s: PINPLAN_WEB_TOKEN=%q, want the one given", name, env["PINPLAN_WEB_TOKEN"])
		}
		id := env["PINPLAN_REPLICA_ID"]
		if id == "" || ids[id] {
			t.Errorf("%s: PINPLAN_REPLICA_ID %q, want one of its own", name, id)
		}
		ids[id] = true
		if len(s.Ports) != 1 || s.Ports[0].HostIP != "127.0.0.1" || fmt.Sprint(s.Ports[0].Target) != strings.TrimPrefix(image["PINPLAN_HTTP_ADDR"], "0.0.0.0:") {
			t.Errorf("%s: ports %+v, want the console's port published on 127.0.0.1 only", name, s.Ports)
		}
		getenv := func(k string) string {
			for _, m := range maps {
				if v, ok := m[k]; ok && v != "" {
					return v
				}
			}
			return ""
		}
		if _, err := config.Load(getenv); err != nil {
			t.Errorf("%s: the image's and the service's settings do not load: %v", name, err)
		}
	}
	if replicas != 3 {
		t.Errorf("%d replicas, want 3", replicas)
	}
}

// unit reads a systemd unit file: Section.Key to its values, in order.
func unit(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	section := ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: %q is no Key=value", path, line)
			}
			out[section+"."+k] = append(out[section+"."+k], v)
		}
	}
	return out
}

// TestSystemdUnit checks the unit's hardening and runs systemd-analyze
// verify on it, with ExecStart pointing at the release binary (verify
// refuses a command that does not exist; nothing else is changed). Any
// warning verify prints fails the test.
func TestSystemdUnit(t *testing.T) {
	path := "pinplan.service"
	u := unit(t, path)
	want := map[string]string{
		"Service.ExecStart":       "/usr/local/bin/pinplan serve",
		"Service.EnvironmentFile": "/etc/pinplan/pinplan.env",
		"Service.DynamicUser":     "yes",
		"Service.StateDirectory":  "pinplan",
		"Service.Environment":     "PINPLAN_DB=/var/lib/pinplan/pinplan.db",
		"Service.ProtectSystem":   "strict",
		"Service.ProtectHome":     "yes",
		"Service.NoNewPrivileges": "yes",
		"Service.PrivateTmp":      "yes",
		"Service.Restart":         "on-failure",
		"Service.UMask":           "0077",
		"Install.WantedBy":        "multi-user.target",
	}
	for k, v := range want {
		if !slices.Contains(u[k], v) {
			t.Errorf("%s: %s=%q, want %q", path, k, u[k], v)
		}
	}

	bin := releaseBinary(t)
	if out, err := exec.Command(bin, "serve", "-h").CombinedOutput(); err != nil {
		t.Errorf("ExecStart's command: pinplan serve -h: %v\n%s", err, out)
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		how := "no systemd-analyze on PATH to verify the unit: install it with `apt-get install -y systemd` (as root), or run `bash .ci/run`"
		if os.Getenv("CI") == "true" {
			t.Fatal(how)
		}
		t.Skip(how)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(t.TempDir(), "pinplan.service")
	text := strings.Replace(string(b), "ExecStart=/usr/local/bin/pinplan ", "ExecStart="+bin+" ", 1)
	if err := os.WriteFile(copyPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", copyPath).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestEnvFile: every name the unit's env file sets or shows commented
// out is a setting, and the file loads both as shipped and with every
// example uncommented.
func TestEnvFile(t *testing.T) {
	b, err := os.ReadFile("pinplan.env")
	if err != nil {
		t.Fatal(err)
	}
	names := settingNames(t)
	active, all := map[string]string{}, map[string]string{}
	assign := regexp.MustCompile(`^(#?)([A-Z][A-Z0-9_]*)=(.*)$`)
	for _, line := range strings.Split(string(b), "\n") {
		m := assign.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		if !slices.Contains(names, m[2]) {
			t.Errorf("pinplan.env: %s is no setting (docs/settings.md)", m[2])
		}
		all[m[2]] = m[3]
		if m[1] == "" {
			active[m[2]] = m[3]
		}
	}
	if len(active) == 0 || len(all) < 5 {
		t.Fatalf("pinplan.env sets %d settings and shows %d", len(active), len(all))
	}
	for name, env := range map[string]map[string]string{"as shipped": active, "every example": all} {
		if _, err := config.Load(func(k string) string { return env[k] }); err != nil {
			t.Errorf("pinplan.env %s: %v", name, err)
		}
	}
}

// TestRunScript runs ./run as the README does: it says what it builds
// before the build, then runs the bot with its arguments (here -demo on a
// free port): the console answers.
func TestRunScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ./cmd/bot")
	}
	dir := t.TempDir()
	p := start(t, dir, map[string]string{"PINPLAN_HTTP_ADDR": "127.0.0.1:0", "PINPLAN_DEMO_DELAY": "1ms"}, filepath.Join(mustAbs(t, root), "run"), "-demo")
	base := p.consoleURL(t, 5*time.Minute)
	if first, _, _ := strings.Cut(p.output(), "\n"); !strings.HasPrefix(first, "pinplan: building ./cmd/bot") {
		t.Errorf("first line %q, want the build announced before it runs", first)
	}
	if code := get(t, base+"/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "pinplan.db")); err != nil {
		t.Errorf("./run's database is not in the folder it ran in: %v", err)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
