/* pomona-seccomp-exec FD PROGRAM [ARG...]
 *
 * Loads the seccomp filter held (as raw BPF) in file descriptor FD, sets no_new_privs, closes FD
 * and executes PROGRAM. The orchestrator starts every sandbox command through it, so the command
 * runs under the sandbox's filter from its first instruction. It exists because loading the
 * filter from Python needs a preexec_fn, which turns Python's vfork into a fork of the whole
 * orchestrator process (tens of milliseconds for every exec); this is a few microseconds.
 * Built at first use by pomona.orchestrator.linux.seccomp, statically, with the system's cc.
 */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(const char *what) {
    fprintf(stderr, "pomona-seccomp-exec: %s: %s\n", what, strerror(errno));
    return 126;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: pomona-seccomp-exec FD PROGRAM [ARG...]\n");
        return 125;
    }
    int fd = atoi(argv[1]);
    struct stat st;
    if (fstat(fd, &st) != 0) return fail("fstat");
    if (st.st_size <= 0 || st.st_size % sizeof(struct sock_filter) || st.st_size > 65536 * 8) {
        errno = EINVAL;
        return fail("the filter");
    }
    struct sock_filter *code = malloc(st.st_size);
    if (code == NULL) return fail("malloc");
    for (off_t done = 0; done < st.st_size;) {  /* pread: the fd's offset is shared */
        ssize_t n = pread(fd, (char *)code + done, st.st_size - done, done);
        if (n <= 0) return fail("reading the filter");
        done += n;
    }
    close(fd);
    struct sock_fprog prog = {.len = st.st_size / sizeof(struct sock_filter), .filter = code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return fail("no_new_privs");
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) return fail("seccomp");
    execv(argv[2], argv + 2);
    return fail(argv[2]);
}
