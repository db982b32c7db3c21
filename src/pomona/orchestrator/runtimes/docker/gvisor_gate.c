/* pomona-gvisor-gate FILTER UID GID PROGRAM [ARG...]
 *
 * How every command enters a gVisor sandbox on the docker runtime. runsc applies a container's
 * seccomp profile to its init only, and an exec as another user keeps the container's
 * capabilities in its effective set; runc does neither. So each exec starts as root through
 * this static program, which does what runc would have: drops to UID:GID (no capabilities
 * left, as the kernel's setuid rules say), clears the ambient set, sets no_new_privs, loads the
 * seccomp filter held as raw BPF in the file FILTER (Pomona's, linux/seccomp.py), and executes
 * PROGRAM (PATH search). Built at first use with the system's cc (runtimes/docker/gvisor.py).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#define MAX_PROGRAM (1 << 20)

static int fail(const char *what) {
    fprintf(stderr, "pomona-gvisor-gate: %s: %s\n", what, strerror(errno));
    return 126;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: pomona-gvisor-gate FILTER UID GID PROGRAM [ARG...]\n");
        return 126;
    }
    static unsigned char program[MAX_PROGRAM];
    int fd = open(argv[1], O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fail("open the filter");
    ssize_t size = 0, n;
    while (size < MAX_PROGRAM && (n = read(fd, program + size, MAX_PROGRAM - size)) > 0) size += n;
    close(fd);
    if (size <= 0 || size % sizeof(struct sock_filter)) {
        errno = EINVAL;
        return fail("read the filter");
    }
    uid_t uid = (uid_t)strtoul(argv[2], NULL, 10);
    gid_t gid = (gid_t)strtoul(argv[3], NULL, 10);
    if (uid != 0) {
        if (setgroups(1, &gid) || setresgid(gid, gid, gid) || setresuid(uid, uid, uid))
            return fail("drop to the user");
    }
    /* a kernel without ambient capabilities (gVisor's says EINVAL) has none to clear */
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) && errno != EINVAL)
        return fail("clear ambient");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) return fail("no_new_privs");
    struct sock_fprog filter = {.len = size / sizeof(struct sock_filter),
                                .filter = (struct sock_filter *)program};
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &filter)) return fail("load the filter");
    execvp(argv[4], argv + 4);
    int missing = errno == ENOENT;
    fail(argv[4]);
    return missing ? 127 : 126;
}
