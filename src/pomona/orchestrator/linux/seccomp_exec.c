/* pomona-enter FILTER USER MNT UTS IPC NET PID ROOT UID GID DIR PROGRAM [ARG...]
 *
 * How every command gets into a `local` sandbox, in one static binary:
 *   - enters the namespaces behind the open file descriptors USER MNT UTS IPC NET PID ("-" skips
 *     one: NET in network="full" mode), which the orchestrator opened from the sandbox's idle
 *     process and checked against the pidfd it holds, so a recycled pid never leads elsewhere;
 *   - takes the sandbox's root (the directory fd ROOT) as its root;
 *   - sets no_new_privs and loads the seccomp filter held as raw BPF in fd FILTER;
 *   - forks (a pid namespace applies to children), and in the child drops to UID:GID ("-" stays
 *     root), closes every descriptor above, changes to DIR and executes PROGRAM (PATH search).
 * The parent waits and leaves the way the child did (its exit code, or its signal).
 *
 * It replaces busybox's setpriv + nsenter + a cd shell (three execs) and exists because loading
 * the filter from Python needs a preexec_fn, which makes Python fork the whole orchestrator
 * (tens of milliseconds) instead of vfork. Built at first use, statically, with the system's cc
 * (pomona.orchestrator.linux.seccomp.loader).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NAMESPACES 6

static int fail(const char *what, const char *detail) {
    fprintf(stderr, "pomona-enter: %s%s%s: %s\n", what, detail ? " " : "", detail ? detail : "",
            strerror(errno));
    return 126;
}

static int number(const char *text) { return strcmp(text, "-") == 0 ? -1 : atoi(text); }

static int load_filter(int fd) {
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
    struct sock_fprog prog = {.len = st.st_size / sizeof(struct sock_filter), .filter = code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return fail("no_new_privs", NULL);
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) return fail("seccomp", NULL);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 13) {
        fprintf(stderr, "usage: pomona-enter FILTER USER MNT UTS IPC NET PID ROOT UID GID DIR PROGRAM [ARG...]\n");
        return 125;
    }
    int filter = number(argv[1]);
    /* user first: it grants the capabilities needed to join the rest, which it owns */
    static const int kinds[NAMESPACES] = {CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC,
                                          CLONE_NEWNET, CLONE_NEWPID};
    static const int order[NAMESPACES] = {0, 3, 2, 4, 5, 1}; /* user ipc uts net pid mnt */
    int fds[NAMESPACES];
    for (int i = 0; i < NAMESPACES; i++) fds[i] = number(argv[2 + i]);
    int root = number(argv[8]);
    for (int k = 0; k < NAMESPACES; k++) {
        int i = order[k];
        if (fds[i] >= 0 && setns(fds[i], kinds[i]) != 0) return fail("setns", argv[2 + i]);
    }
    if (fchdir(root) != 0 || chroot(".") != 0 || chdir("/") != 0) return fail("entering the root", NULL);
    int status = load_filter(filter);
    if (status) return status;

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
    int uid = number(argv[9]), gid = number(argv[10]);
    if (uid >= 0) {
        gid_t groups[1] = {(gid_t)gid};
        if (setgroups(1, groups) != 0 && errno != EPERM) return fail("setgroups", NULL);
        if (setgid(gid) != 0) return fail("setgid", argv[10]);
        if (setuid(uid) != 0) return fail("setuid", argv[9]);
    }
    for (int i = 0; i < NAMESPACES; i++)
        if (fds[i] >= 0) close(fds[i]);
    close(root);
    close(filter);
    if (chdir(argv[11]) != 0) return fail("cannot change to", argv[11]);
    execvp(argv[12], argv + 12);
    int code = errno == ENOENT ? 127 : 126;
    fail("cannot run", argv[12]);
    return code;
}
