/* pomona-enter GATE LIMITS FILTER USER MNT UTS IPC NET PID ROOT UID GID DIR PROGRAM [ARG...]
 *
 * How every command gets into a `local` sandbox, in one static binary:
 *   - waits for a byte on the pipe GATE ("-": none) while the orchestrator moves it into the
 *     sandbox's cgroup, so the command cannot fork outside the limits, and exits running nothing
 *     if the orchestrator died instead;
 *   - becomes non-dumpable first: from the moment it enters the sandbox's pid namespace until
 *     it executes the command, no process inside (root included) may read its memory or open
 *     its descriptors through /proc;
 *   - reads the seccomp program from the sealed memfd FILTER and closes it;
 *   - LIMITS ("-": none) are resource limits for where no cgroup can hold the command (an
 *     ordinary user's runtime on a machine without cgroup delegation): "nproc=N,as=BYTES";
 *   - enters the namespaces behind the open descriptors MNT UTS IPC NET PID ("-" skips one: NET
 *     in network="full" mode) while it is still the host's root (the sandbox's init made them
 *     in the host's user namespace), which the orchestrator opened from the sandbox's init and
 *     checked against the pidfd it holds, so a recycled pid never leads elsewhere; takes the
 *     sandbox's root (the directory fd ROOT) as its root; closes them all;
 *   - joins the sandbox's user namespace USER last, keeps in the bounding set only the
 *     capabilities Docker gives a container's root, and becomes UID:GID inside (host ids of the
 *     sandbox's own range);
 *   - sets no_new_privs and loads the filter;
 *   - forks (a pid namespace applies to children); the child, holding no descriptor but 0-2,
 *     changes to DIR and executes PROGRAM (PATH search). The parent waits and leaves the way
 *     the child did (its exit code, or its signal).
 *
 * It exists because loading the filter from Python needs a preexec_fn, which makes Python fork
 * the whole orchestrator (tens of milliseconds) instead of vfork. Built at first use,
 * statically, with the system's cc (pomona.orchestrator.linux.helpers).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define NAMESPACES 6

/* Docker's default capability set for a container's root (moby oci/caps/defaults.go) */
static const int KEPT[] = {CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_FSETID, CAP_KILL,
                           CAP_SETGID, CAP_SETUID, CAP_SETPCAP, CAP_NET_BIND_SERVICE, CAP_NET_RAW,
                           CAP_SYS_CHROOT, CAP_MKNOD, CAP_AUDIT_WRITE, CAP_SETFCAP};

static int fail(const char *what, const char *detail) {
    fprintf(stderr, "pomona-enter: %s%s%s: %s\n", what, detail ? " " : "", detail ? detail : "",
            strerror(errno));
    return 126;
}

static int number(const char *text) { return strcmp(text, "-") == 0 ? -1 : atoi(text); }

static int read_filter(int fd, struct sock_fprog *prog) {
    struct stat st;
    if (fstat(fd, &st) != 0) return fail("the filter", NULL);
    if (st.st_size <= 0 || st.st_size % sizeof(struct sock_filter) || st.st_size > 65536 * 8) {
        errno = EINVAL;
        return fail("the filter", NULL);
    }
    struct sock_filter *code = malloc(st.st_size);
    if (code == NULL) return fail("malloc", NULL);
    for (off_t done = 0; done < st.st_size;) { /* pread: the fd's offset is shared */
        ssize_t n = pread(fd, (char *)code + done, st.st_size - done, done);
        if (n <= 0) return fail("reading the filter", NULL);
        done += n;
    }
    close(fd);
    *prog = (struct sock_fprog){.len = st.st_size / sizeof(struct sock_filter), .filter = code};
    return 0;
}

static int keep_docker_capabilities(void) {
    for (int cap = 0; cap < 64; cap++) {
        int kept = 0;
        for (size_t i = 0; i < sizeof KEPT / sizeof KEPT[0]; i++) kept |= KEPT[i] == cap;
        if (!kept && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
            return fail("dropping a capability", NULL);
    }
    return 0;
}

static int set_limits(const char *limits) {
    if (strcmp(limits, "-") == 0) return 0;
    char copy[256];
    snprintf(copy, sizeof copy, "%s", limits);
    for (char *item = strtok(copy, ","); item; item = strtok(NULL, ",")) {
        char *value = strchr(item, '=');
        if (!value) continue;
        *value++ = 0;
        struct rlimit limit = {strtoull(value, NULL, 10), strtoull(value, NULL, 10)};
        int kind = strcmp(item, "nproc") == 0 ? RLIMIT_NPROC : strcmp(item, "as") == 0 ? RLIMIT_AS : -1;
        if (kind >= 0 && setrlimit(kind, &limit) != 0) return fail("setrlimit", item);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 15) {
        fprintf(stderr, "usage: pomona-enter GATE LIMITS FILTER USER MNT UTS IPC NET PID ROOT UID GID DIR PROGRAM [ARG...]\n");
        return 125;
    }
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return fail("PR_SET_DUMPABLE", NULL);
    int gate = number(argv[1]);
    if (gate >= 0) {
        char byte;
        ssize_t n;
        while ((n = read(gate, &byte, 1)) < 0 && errno == EINTR) {}
        if (n != 1) return 125; /* the orchestrator died before it let this command in */
        close(gate);
    }
    const char *limits = argv[2];
    argv += 2, argc -= 2; /* the rest as before the gate */
    struct sock_fprog filter;
    int status = read_filter(number(argv[1]), &filter);
    if (status) return status;
    static const int kinds[NAMESPACES] = {CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC,
                                          CLONE_NEWNET, CLONE_NEWPID};
    static const int order[NAMESPACES - 1] = {3, 2, 4, 5, 1}; /* ipc uts net pid mnt */
    int fds[NAMESPACES];
    for (int i = 0; i < NAMESPACES; i++) fds[i] = number(argv[2 + i]);
    int root = number(argv[8]);
    for (int k = 0; k < NAMESPACES - 1; k++) {
        int i = order[k];
        if (fds[i] >= 0 && setns(fds[i], kinds[i]) != 0) return fail("setns", argv[2 + i]);
        if (fds[i] >= 0) close(fds[i]);
    }
    if (fchdir(root) != 0 || chroot(".") != 0 || chdir("/") != 0) return fail("entering the root", NULL);
    close(root);
    if (setns(fds[0], CLONE_NEWUSER) != 0) return fail("setns", argv[2]);
    close(fds[0]);
    if ((status = keep_docker_capabilities())) return status;
    gid_t gid = (gid_t)atol(argv[10]);
    if (setgroups(1, &gid) != 0) return fail("setgroups", NULL);
    if (setresgid(gid, gid, gid) != 0) return fail("setgid", argv[10]);
    if (setresuid(atol(argv[9]), atol(argv[9]), atol(argv[9])) != 0) return fail("setuid", argv[9]);
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return fail("PR_SET_DUMPABLE", NULL);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return fail("no_new_privs", NULL);
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &filter, 0, 0) != 0) return fail("seccomp", NULL);

    pid_t child = fork();
    if (child < 0) return fail("fork", NULL);
    if (child > 0) {
        int wstatus;
        while (waitpid(child, &wstatus, 0) < 0)
            if (errno != EINTR) return fail("wait", NULL);
        if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
        int sig = WTERMSIG(wstatus);
        signal(sig, SIG_DFL);
        kill(getpid(), sig); /* leave as the child did */
        return 128 + sig;
    }
    syscall(SYS_close_range, 3, ~0U, 0);
    if ((status = set_limits(limits))) return status;
    if (chdir(argv[11]) != 0) return fail("cannot change to", argv[11]);
    execvp(argv[12], argv + 12);
    int code = errno == ENOENT ? 127 : 126;
    fail("cannot run", argv[12]);
    return code;
}
