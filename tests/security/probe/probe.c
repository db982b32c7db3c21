/* pomona-probe [HOST_ABSTRACT_SOCKET]
 *
 * What code inside a sandbox may do, asked of the kernel one check at a time: the differential
 * test (tests/security/test_differential.py) runs it as root and as the default user in
 * `docker run` with the engine's defaults and in every Pomona runtime, and requires Pomona to be
 * at least as strict on every check.
 *
 * Output, one line per check: NAME TAB yes|no TAB DETAIL, where "yes" means the sandbox was let
 * do it (less strict) and "no" that it was refused; lines starting with '@' are facts the runner
 * compares with the host's (namespace inodes). Every check runs in a child of its own, so a
 * namespace it enters, a mount it makes or a filter that kills it ends with that child: a
 * child killed by SIGSYS was refused (a seccomp kill), any other end is reported as "error".
 *
 * Nothing here changes the machine when it is let through: a write puts back the value just
 * read, except where a stale value could run a program (core_pattern, modprobe: only opened for
 * writing, which is where the kernel checks who may write them),
 * destructive syscalls get arguments the kernel refuses after its privilege check (so EINVAL,
 * EBADF or ENOENT mean "reached the kernel's work", EPERM/EACCES/ENOSYS mean "refused"), and
 * device files are only opened.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/io_uring.h>
#include <linux/keyctl.h>
#include <linux/perf_event.h>
#include <linux/sched.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/quota.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DETAIL 200
typedef int (*check_fn)(char *detail);

static char workdir[256];   /* a private scratch directory */
static const char *host_socket; /* an abstract unix socket listening in the host's namespace */

/* -- helpers ---------------------------------------------------------------------------------- */

static int errno_detail(char *detail, long result) {
    snprintf(detail, DETAIL, "%s", result >= 0 ? "ok" : strerrorname_np(errno));
    return 0;
}

/* The syscall got past the kernel's privilege checks (and seccomp): anything but a refusal. */
static int reached(char *detail, long result) {
    errno_detail(detail, result);
    return result >= 0 || (errno != EPERM && errno != EACCES && errno != ENOSYS);
}

static int succeeded(char *detail, long result) {
    errno_detail(detail, result);
    return result >= 0;
}

static ssize_t read_file(const char *path, char *buffer, size_t size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t total = 0, n;
    while ((size_t)total < size - 1 && (n = read(fd, buffer + total, size - 1 - total)) > 0)
        total += n;
    int saved = errno;
    close(fd);
    errno = saved;
    if (total >= 0) buffer[total] = 0;
    return n < 0 && total == 0 ? -1 : total;
}

/* Readable, with something in it: a masked file is /dev/null or absent. */
static int has_content(const char *path, char *detail) {
    char buffer[64];
    ssize_t n = read_file(path, buffer, sizeof buffer);
    if (n < 0) return errno_detail(detail, -1);
    snprintf(detail, DETAIL, "%zd bytes", n);
    return n > 0;
}

/* A directory with entries: a masked one is an empty tmpfs or absent. */
static int lists_entries(const char *path, char *detail) {
    DIR *dir = opendir(path);
    if (!dir) return errno_detail(detail, -1);
    int entries = 0;
    struct dirent *e;
    while ((e = readdir(dir)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) entries++;
    closedir(dir);
    snprintf(detail, DETAIL, "%d entries", entries);
    return entries > 0;
}

static int opens_for_writing(const char *path, char *detail) {
    int fd = open(path, O_WRONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd >= 0) close(fd);
    return succeeded(detail, fd);
}

static int opens_for_reading(const char *path, char *detail) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd >= 0) close(fd);
    return succeeded(detail, fd);
}

/* Write back exactly what the file holds: permitted only if the kernel takes the write. */
static int writes_back(const char *path, char *detail) {
    char value[4096];
    ssize_t n = read_file(path, value, sizeof value);
    if (n < 0) return errno_detail(detail, -1);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return errno_detail(detail, -1);
    ssize_t written = write(fd, value, n);
    int saved = errno;
    close(fd);
    errno = saved;
    return succeeded(detail, written);
}

static int unshares(int flags, char *detail) { return succeeded(detail, unshare(flags)); }

/* A line of /proc/self/mountinfo matches: fstype (after " - ") and mount point (5th field). */
static int mountinfo_has(const char *point, const char *fstype, const char *option, char *detail) {
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f) return errno_detail(detail, -1);
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        char mnt[1024], opts[1024], type[256];
        if (sscanf(line, "%*s %*s %*s %*s %1023s %1023s", mnt, opts) != 2) continue;
        char *dash = strstr(line, " - ");
        if (!dash || sscanf(dash + 3, "%255s", type) != 1) continue;
        if (point && strcmp(mnt, point)) continue;
        if (fstype && strcmp(type, fstype)) continue;
        if (option) {
            int has = 0;
            char *tok, *save = NULL;
            for (tok = strtok_r(opts, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
                if (!strcmp(tok, option)) has = 1;
            if (!has) continue;
        }
        found = 1;
        snprintf(detail, DETAIL, "%.150s (%.40s)", mnt, type);
    }
    fclose(f);
    if (!found) snprintf(detail, DETAIL, "none");
    return found;
}

/* -- syscalls --------------------------------------------------------------------------------- */

static int c_io_uring(char *d) {
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    long fd = syscall(SYS_io_uring_setup, 1, &p);
    return succeeded(d, fd);
}
static int c_unshare_user(char *d) { return unshares(CLONE_NEWUSER, d); }
static int c_unshare_mount(char *d) { return unshares(CLONE_NEWNS, d); }
static int c_unshare_net(char *d) { return unshares(CLONE_NEWNET, d); }
static int c_unshare_pid(char *d) { return unshares(CLONE_NEWPID, d); }
static int c_unshare_uts(char *d) { return unshares(CLONE_NEWUTS, d); }
static int c_unshare_ipc(char *d) { return unshares(CLONE_NEWIPC, d); }
static int c_unshare_cgroup(char *d) { return unshares(CLONE_NEWCGROUP, d); }
static int c_unshare_time(char *d) { return unshares(CLONE_NEWTIME, d); }

static int c_clone_newuser(char *d) {
    long pid = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
    if (pid == 0) _exit(0);
    if (pid > 0) waitpid(pid, NULL, 0);
    return succeeded(d, pid);
}

static int c_clone3(char *d) {
    struct clone_args args;
    memset(&args, 0, sizeof args);
    args.exit_signal = SIGCHLD;
    long pid = syscall(SYS_clone3, &args, sizeof args);
    if (pid == 0) _exit(0);
    if (pid > 0) waitpid(pid, NULL, 0);
    return succeeded(d, pid);
}

static int c_mount_tmpfs(char *d) {
    long r = mount("pomona-probe", workdir, "tmpfs", 0, "size=1m");
    if (r == 0) umount2(workdir, MNT_DETACH);
    return succeeded(d, r);
}

static int c_mount_bind(char *d) {
    long r = mount(workdir, workdir, NULL, MS_BIND, NULL);
    if (r == 0) umount2(workdir, MNT_DETACH);
    return succeeded(d, r);
}

static int c_mount_proc(char *d) {
    long r = mount("proc", workdir, "proc", 0, NULL);
    if (r == 0) umount2(workdir, MNT_DETACH);
    return succeeded(d, r);
}

static int c_umount(char *d) { return reached(d, umount2(workdir, 0)); } /* EINVAL: not a mount */
static int c_pivot_root(char *d) { return reached(d, syscall(SYS_pivot_root, workdir, workdir)); }
static int c_fsopen(char *d) { return succeeded(d, syscall(SYS_fsopen, "tmpfs", 0)); }
static int c_open_tree(char *d) {
    return succeeded(d, syscall(SYS_open_tree, AT_FDCWD, workdir, 1 /* OPEN_TREE_CLONE */));
}
static int c_mount_setattr(char *d) { return reached(d, syscall(SYS_mount_setattr, -1, "", 0, NULL, 0)); }
static int c_move_mount(char *d) { return reached(d, syscall(SYS_move_mount, -1, "", -1, "", 0)); }

static int c_keyctl(char *d) {
    return succeeded(d, syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0));
}
static int c_keyctl_join(char *d) {
    return succeeded(d, syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL));
}
static int c_add_key(char *d) {
    return succeeded(d, syscall(SYS_add_key, "user", "pomona-probe", "x", 1, KEY_SPEC_PROCESS_KEYRING));
}
static int c_request_key(char *d) {
    return reached(d, syscall(SYS_request_key, "user", "pomona-probe-absent", NULL, 0));
}

static int c_bpf(char *d) {
    union bpf_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.map_type = BPF_MAP_TYPE_ARRAY;
    attr.key_size = 4;
    attr.value_size = 4;
    attr.max_entries = 1;
    return succeeded(d, syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof attr));
}

static int c_perf_event_open(char *d) {
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.type = PERF_TYPE_SOFTWARE;
    attr.size = sizeof attr;
    attr.config = PERF_COUNT_SW_CPU_CLOCK;
    attr.disabled = 1;
    return succeeded(d, syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0));
}

static pid_t sleeper(void) {
    pid_t pid = fork();
    if (pid == 0) {
        pause();
        _exit(0);
    }
    return pid;
}

static void reap(pid_t pid) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static int c_ptrace_traceme(char *d) { return succeeded(d, ptrace(PTRACE_TRACEME, 0, 0, 0)); }

static int c_ptrace_child(char *d) {
    pid_t pid = sleeper();
    long r = ptrace(PTRACE_ATTACH, pid, 0, 0);
    reap(pid);
    return succeeded(d, r);
}

static int c_ptrace_init(char *d) {
    long r = ptrace(PTRACE_SEIZE, 1, 0, 0);
    return succeeded(d, r);
}

static int c_process_vm_readv(char *d) {
    static char source[16] = "pomona";
    char target[16];
    struct iovec local = {target, sizeof target}, remote = {source, sizeof source};
    pid_t pid = sleeper();
    long r = syscall(SYS_process_vm_readv, pid, &local, 1, &remote, 1, 0);
    reap(pid);
    return succeeded(d, r);
}

static int c_kcmp(char *d) { return succeeded(d, syscall(SYS_kcmp, getpid(), getpid(), 0 /* KCMP_FILE */, 0, 0)); }
static int c_kexec_load(char *d) { return reached(d, syscall(SYS_kexec_load, 0, 0, NULL, 0xffff0000UL)); }
static int c_init_module(char *d) { return reached(d, syscall(SYS_init_module, NULL, 0, "")); }
static int c_finit_module(char *d) { return reached(d, syscall(SYS_finit_module, -1, "", 0)); }
static int c_delete_module(char *d) { return reached(d, syscall(SYS_delete_module, "pomona_probe_absent", O_NONBLOCK)); }
static int c_settimeofday(char *d) { return succeeded(d, syscall(SYS_settimeofday, NULL, NULL)); }
static int c_clock_settime(char *d) {
    struct timespec bad = {0, -1}; /* invalid: EINVAL once past seccomp and the capability check */
    return reached(d, syscall(SYS_clock_settime, CLOCK_REALTIME, &bad));
}
static int c_swapon(char *d) { return reached(d, syscall(SYS_swapon, "/pomona-probe-absent", 0)); }
static int c_reboot(char *d) { return reached(d, syscall(SYS_reboot, 0, 0, 0, NULL)); } /* bad magic */
static int c_acct(char *d) { return reached(d, syscall(SYS_acct, "/pomona-probe-absent/x")); }
static int c_quotactl(char *d) {
    return reached(d, syscall(SYS_quotactl, QCMD(Q_SYNC, 0), "/pomona-probe-absent", 0, NULL));
}
static int c_open_by_handle_at(char *d) {
    char handle[64];
    memset(handle, 0, sizeof handle);
    return reached(d, syscall(SYS_open_by_handle_at, -1, handle, O_RDONLY));
}
static int c_name_to_handle_at(char *d) {
    char handle[256];
    int mount_id;
    memset(handle, 0, sizeof handle);
    ((unsigned int *)handle)[0] = 128;
    return succeeded(d, syscall(SYS_name_to_handle_at, AT_FDCWD, "/", handle, &mount_id, 0));
}
static int c_userfaultfd(char *d) { return succeeded(d, syscall(SYS_userfaultfd, O_CLOEXEC)); }
static int c_fanotify_init(char *d) { return succeeded(d, syscall(SYS_fanotify_init, 0, O_RDONLY)); }
static int c_iopl(char *d) { return succeeded(d, syscall(SYS_iopl, 3)); }
static int c_ioperm(char *d) { return succeeded(d, syscall(SYS_ioperm, 0x80, 1, 1)); }
static int c_syslog(char *d) {
    char buffer[64];
    return succeeded(d, syscall(SYS_syslog, 3 /* READ_ALL */, buffer, sizeof buffer));
}
static int c_setns(char *d) {
    int fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno_detail(d, -1);
    return succeeded(d, setns(fd, CLONE_NEWNET));
}
static int c_chroot(char *d) { return succeeded(d, chroot("/")); }
static int c_sethostname(char *d) {
    char name[256] = {0};
    gethostname(name, sizeof name - 1);
    return succeeded(d, sethostname(name, strlen(name)));
}
static int c_setdomainname(char *d) {
    char name[256] = {0};
    getdomainname(name, sizeof name - 1);
    return succeeded(d, setdomainname(name, strlen(name)));
}
static int c_personality(char *d) {
    int current = personality(0xffffffff);
    return succeeded(d, personality(current | ADDR_NO_RANDOMIZE));
}
static int c_get_mempolicy(char *d) { return succeeded(d, syscall(SYS_get_mempolicy, NULL, NULL, 0, NULL, 0)); }
static int c_setrlimit(char *d) {
    struct rlimit limit;
    getrlimit(RLIMIT_NOFILE, &limit);
    if (limit.rlim_max == RLIM_INFINITY) return snprintf(d, DETAIL, "unlimited already"), 1;
    limit.rlim_max += 1;
    return succeeded(d, setrlimit(RLIMIT_NOFILE, &limit));
}
static int c_setpriority(char *d) {
    int now = getpriority(PRIO_PROCESS, 0);
    return succeeded(d, setpriority(PRIO_PROCESS, 0, now - 1));
}
static int c_sched_fifo(char *d) {
    struct sched_param param = {.sched_priority = 1};
    return succeeded(d, sched_setscheduler(0, SCHED_FIFO, &param));
}
static int c_mknod_char(char *d) {
    char path[300];
    snprintf(path, sizeof path, "%s/null", workdir);
    long r = mknod(path, S_IFCHR | 0600, makedev(1, 3));
    unlink(path);
    return succeeded(d, r);
}
static int c_chown_other(char *d) {
    char path[300];
    snprintf(path, sizeof path, "%s/owned", workdir);
    int fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) return errno_detail(d, -1);
    long r = fchown(fd, 4242, 4242);
    close(fd);
    unlink(path);
    return succeeded(d, r);
}
static int c_socket_vsock(char *d) { return succeeded(d, socket(40 /* AF_VSOCK */, SOCK_STREAM, 0)); }

/* -- /dev ------------------------------------------------------------------------------------- */

static int open_new_node(mode_t type, int major, int minor, char *d) {
    char path[300];
    snprintf(path, sizeof path, "%s/node", workdir);
    unlink(path);
    if (mknod(path, type | 0600, makedev(major, minor)) < 0) return errno_detail(d, -1);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd >= 0) close(fd);
    unlink(path);
    return succeeded(d, fd);
}
static int c_dev_new_mem(char *d) { return open_new_node(S_IFCHR, 1, 1, d); }
static int c_dev_new_block(char *d) { return open_new_node(S_IFBLK, 7, 0, d); }

static const char *usual_devices[] = {"null", "zero", "full", "random", "urandom", "tty",
                                      "console", "ptmx", NULL};

static int c_dev_extra_nodes(char *d) {
    DIR *dir = opendir("/dev");
    if (!dir) return errno_detail(d, -1);
    struct dirent *e;
    int extra = 0;
    d[0] = 0;
    while ((e = readdir(dir))) {
        char path[300];
        struct stat st;
        snprintf(path, sizeof path, "/dev/%s", e->d_name);
        if (lstat(path, &st) || !(S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))) continue;
        int usual = 0;
        for (const char **u = usual_devices; *u; u++)
            if (!strcmp(*u, e->d_name)) usual = 1;
        if (usual) continue;
        if (extra++ < 8 && strlen(d) + strlen(e->d_name) + 2 < DETAIL)
            strcat(strcat(d, e->d_name), " ");
    }
    closedir(dir);
    if (!extra) snprintf(d, DETAIL, "none");
    return extra > 0;
}
static int c_dev_kmsg(char *d) { return opens_for_reading("/dev/kmsg", d); }
static int c_dev_mem(char *d) { return opens_for_reading("/dev/mem", d); }
static int c_dev_kvm(char *d) { return opens_for_reading("/dev/kvm", d); }
static int c_dev_tun(char *d) { return opens_for_reading("/dev/net/tun", d); }
static int c_dev_fuse(char *d) { return opens_for_reading("/dev/fuse", d); }
static int c_dev_devtmpfs(char *d) { return mountinfo_has(NULL, "devtmpfs", NULL, d); }
static int c_dev_null_chmod(char *d) {
    struct stat st;
    if (stat("/dev/null", &st)) return errno_detail(d, -1);
    return succeeded(d, chmod("/dev/null", st.st_mode & 07777));
}
static int c_dev_null_chown(char *d) {
    struct stat st;
    if (stat("/dev/null", &st)) return errno_detail(d, -1);
    return succeeded(d, chown("/dev/null", st.st_uid, st.st_gid));
}

/* -- /proc ------------------------------------------------------------------------------------ */

static int c_proc_kcore(char *d) { return has_content("/proc/kcore", d); }
static int c_proc_keys(char *d) { return has_content("/proc/keys", d); }
static int c_proc_timer_list(char *d) { return has_content("/proc/timer_list", d); }
static int c_proc_sched_debug(char *d) { return has_content("/proc/sched_debug", d); }
static int c_proc_latency_stats(char *d) { return has_content("/proc/latency_stats", d); }
static int c_proc_acpi(char *d) { return lists_entries("/proc/acpi", d); }
static int c_proc_scsi(char *d) { return lists_entries("/proc/scsi", d); }
static int c_proc_asound(char *d) { return lists_entries("/proc/asound", d); }
static int c_proc_kallsyms(char *d) {
    char buffer[64];
    if (read_file("/proc/kallsyms", buffer, sizeof buffer) <= 0) return errno_detail(d, -1);
    int real = strncmp(buffer, "0000000000000000", 16) != 0;
    snprintf(d, DETAIL, real ? "real addresses" : "zeroed");
    return real;
}
static int c_proc_sysrq(char *d) { return opens_for_writing("/proc/sysrq-trigger", d); }
static int c_proc_irq(char *d) { return opens_for_writing("/proc/irq/default_smp_affinity", d); }
static int c_proc_sys_mount(char *d) {
    /* /proc/sys itself read-write: a mount point of its own with ro, or not */
    char detail[DETAIL];
    if (mountinfo_has("/proc/sys", NULL, "ro", detail)) return snprintf(d, DETAIL, "read-only"), 0;
    return writes_back("/proc/sys/kernel/hostname", d);
}
static int c_proc_init_environ(char *d) { return has_content("/proc/1/environ", d); }
static int c_proc_init_mem(char *d) { return opens_for_reading("/proc/1/mem", d); }

static int status_field(const char *field) {
    char buffer[8192];
    if (read_file("/proc/self/status", buffer, sizeof buffer) < 0) return -1;
    char *at = strstr(buffer, field);
    return at ? atoi(at + strlen(field)) : -1;
}
static int c_seccomp_off(char *d) {
    int mode = status_field("Seccomp:");
    snprintf(d, DETAIL, "mode %d", mode);
    return mode != 2;
}
static int c_no_new_privs_off(char *d) {
    int value = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);
    snprintf(d, DETAIL, "%d", value);
    return value != 1;
}

/* -- sysctls ---------------------------------------------------------------------------------- */

static int c_core_pattern(char *d) { return opens_for_writing("/proc/sys/kernel/core_pattern", d); }
static int c_modprobe(char *d) { return opens_for_writing("/proc/sys/kernel/modprobe", d); }
static int c_sysrq(char *d) { return writes_back("/proc/sys/kernel/sysrq", d); }
static int c_randomize(char *d) { return writes_back("/proc/sys/kernel/randomize_va_space", d); }
static int c_kptr_restrict(char *d) { return writes_back("/proc/sys/kernel/kptr_restrict", d); }
static int c_overcommit(char *d) { return writes_back("/proc/sys/vm/overcommit_memory", d); }
static int c_protected_symlinks(char *d) { return writes_back("/proc/sys/fs/protected_symlinks", d); }
static int c_max_userns(char *d) { return writes_back("/proc/sys/user/max_user_namespaces", d); }
static int c_hostname_sysctl(char *d) { return writes_back("/proc/sys/kernel/hostname", d); }
static int c_shmmax(char *d) { return writes_back("/proc/sys/kernel/shmmax", d); }
static int c_ip_forward(char *d) { return writes_back("/proc/sys/net/ipv4/ip_forward", d); }
static int c_somaxconn(char *d) { return writes_back("/proc/sys/net/core/somaxconn", d); }

/* -- /sys ------------------------------------------------------------------------------------- */

static int c_sys_thp(char *d) { return opens_for_writing("/sys/kernel/mm/transparent_hugepage/enabled", d); }
static int c_sys_uevent_helper(char *d) { return opens_for_writing("/sys/kernel/uevent_helper", d); }
static int c_sys_power(char *d) { return opens_for_writing("/sys/power/state", d); }
static int c_sys_net_mtu(char *d) { return writes_back("/sys/class/net/lo/mtu", d); }
static int c_sys_firmware(char *d) { return lists_entries("/sys/firmware", d); }
static int c_sys_debug(char *d) { return lists_entries("/sys/kernel/debug", d); }
static int c_sys_security(char *d) { return lists_entries("/sys/kernel/security", d); }
static int c_sys_rw(char *d) { return mountinfo_has("/sys", "sysfs", "rw", d); }

/* -- cgroups ---------------------------------------------------------------------------------- */

static int c_cgroup_mkdir(char *d) {
    const char *parents[] = {"/sys/fs/cgroup/pids", "/sys/fs/cgroup/memory", "/sys/fs/cgroup", NULL};
    for (const char **p = parents; *p; p++) {
        struct statfs fs; /* a directory in a tmpfs over /sys/fs/cgroup is no cgroup */
        if (statfs(*p, &fs) || (fs.f_type != 0x27e0eb && fs.f_type != 0x63677270)) continue;
        char path[300];
        snprintf(path, sizeof path, "%s/pomona-probe-%d", *p, getpid());
        if (mkdir(path, 0755) == 0) {
            rmdir(path);
            return snprintf(d, DETAIL, "%s", *p), 1;
        }
        errno_detail(d, -1);
    }
    if (!d[0]) snprintf(d, DETAIL, "no cgroup filesystem");
    return 0;
}
static int c_cgroup_release_agent(char *d) {
    const char *paths[] = {"/sys/fs/cgroup/memory/release_agent", "/sys/fs/cgroup/pids/release_agent",
                           "/sys/fs/cgroup/release_agent", NULL};
    for (const char **p = paths; *p; p++)
        if (opens_for_writing(*p, d)) return 1;
    return 0;
}
static int c_cgroup_own_limit(char *d) {
    const char *paths[] = {"/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max", NULL};
    for (const char **p = paths; *p; p++)
        if (writes_back(*p, d)) return 1;
    return 0;
}
static int c_cgroup_rw(char *d) {
    return mountinfo_has(NULL, "cgroup", "rw", d) || mountinfo_has(NULL, "cgroup2", "rw", d);
}
static int first_readable(const char *const *paths, char *value, size_t size) {
    for (const char *const *p = paths; *p; p++)
        if (read_file(*p, value, size) > 0) return 1;
    return 0;
}
static int c_no_pids_limit(char *d) {
    const char *paths[] = {"/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max", NULL};
    char value[64];
    if (!first_readable(paths, value, sizeof value)) return snprintf(d, DETAIL, "unreadable"), 1;
    value[strcspn(value, "\n")] = 0;
    snprintf(d, DETAIL, "%s", value);
    return !strcmp(value, "max");
}
static int c_no_memory_limit(char *d) {
    const char *paths[] = {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max", NULL};
    char value[64];
    if (!first_readable(paths, value, sizeof value)) return snprintf(d, DETAIL, "unreadable"), 1;
    value[strcspn(value, "\n")] = 0;
    snprintf(d, DETAIL, "%s", value);
    return !strcmp(value, "max") || strtoull(value, NULL, 10) >= (1ULL << 62);
}

/* -- mounts and identity ---------------------------------------------------------------------- */

static int c_shared_propagation(char *d) {
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f) return errno_detail(d, -1);
    char line[4096];
    int shared = 0;
    while (!shared && fgets(line, sizeof line, f))
        if (strstr(line, " shared:")) {
            char mnt[1024];
            sscanf(line, "%*s %*s %*s %*s %1023s", mnt);
            snprintf(d, DETAIL, "%.150s", mnt);
            shared = 1;
        }
    fclose(f);
    if (!shared) snprintf(d, DETAIL, "none");
    return shared;
}
static int c_root_is_host_root(char *d) {
    char map[4096];
    if (read_file("/proc/self/uid_map", map, sizeof map) < 0) return errno_detail(d, -1);
    unsigned long inside, outside, count;
    char *line = map;
    while (sscanf(line, "%lu %lu %lu", &inside, &outside, &count) == 3) {
        if (inside == 0) {
            snprintf(d, DETAIL, "0 -> %lu", outside);
            return outside == 0;
        }
        line = strchr(line, '\n');
        if (!line) break;
        line++;
    }
    return snprintf(d, DETAIL, "unmapped"), 0;
}

/* -- network ---------------------------------------------------------------------------------- */

static int c_net_interface(char *d) {
    struct if_nameindex *names = if_nameindex(), *n;
    int found = 0;
    d[0] = 0;
    for (n = names; n && n->if_index; n++)
        if (strcmp(n->if_name, "lo")) {
            found = 1;
            snprintf(d, DETAIL, "%s", n->if_name);
            break;
        }
    if (names) if_freenameindex(names);
    if (!found) snprintf(d, DETAIL, "loopback only");
    return found;
}
static int c_net_route(char *d) {
    char routes[8192];
    if (read_file("/proc/net/route", routes, sizeof routes) < 0) return errno_detail(d, -1);
    char *line = strchr(routes, '\n');
    while (line && *++line) {
        char iface[64];
        unsigned long destination;
        if (sscanf(line, "%63s %lx", iface, &destination) == 2 && destination == 0)
            return snprintf(d, DETAIL, "via %s", iface), 1;
        line = strchr(line, '\n');
    }
    return snprintf(d, DETAIL, "none"), 0;
}
static int c_net_packet(char *d) { return succeeded(d, socket(AF_PACKET, SOCK_RAW, 0)); }
static int c_net_raw(char *d) { return succeeded(d, socket(AF_INET, SOCK_RAW, IPPROTO_ICMP)); }
static int c_net_admin(char *d) {
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) return errno_detail(d, -1);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    strcpy(ifr.ifr_name, "lo");
    if (ioctl(fd, SIOCGIFMTU, &ifr) < 0) return errno_detail(d, -1);
    return succeeded(d, ioctl(fd, SIOCSIFMTU, &ifr)); /* the same MTU */
}
static int c_net_low_port(char *d) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(999), .sin_addr = {htonl(INADDR_LOOPBACK)}};
    long r = bind(fd, (struct sockaddr *)&a, sizeof a);
    return r == 0 || errno == EADDRINUSE ? snprintf(d, DETAIL, "bound"), 1 : errno_detail(d, -1);
}
static int connects_unix(const char *path, int abstract, char *d) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t length = strlen(path);
    if (length + 2 > sizeof a.sun_path) return snprintf(d, DETAIL, "name too long"), 0;
    memcpy(a.sun_path + (abstract ? 1 : 0), path, length);
    socklen_t size = offsetof(struct sockaddr_un, sun_path) + length + (abstract ? 1 : 0);
    return succeeded(d, connect(fd, (struct sockaddr *)&a, size));
}
static int c_engine_socket(char *d) {
    const char *paths[] = {"/var/run/docker.sock", "/run/docker.sock", "/run/podman/podman.sock",
                           "/run/containerd/containerd.sock", NULL};
    for (const char **p = paths; *p; p++)
        if (connects_unix(*p, 0, d)) return snprintf(d, DETAIL, "%s", *p), 1;
    return 0;
}
static int c_host_abstract(char *d) {
    if (!host_socket) return snprintf(d, DETAIL, "not asked"), 0;
    return connects_unix(host_socket, 1, d);
}

/* -- capabilities ----------------------------------------------------------------------------- */

static const char *cap_names[] = {
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
    "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
    "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
    "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
    "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
    "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE"};
#define CAPS (int)(sizeof cap_names / sizeof *cap_names)

static unsigned long long cap_set(const char *field) {
    char buffer[8192];
    if (read_file("/proc/self/status", buffer, sizeof buffer) < 0) return 0;
    char *at = strstr(buffer, field);
    return at ? strtoull(at + strlen(field), NULL, 16) : 0;
}

static void capabilities(void) {
    const char *sets[][2] = {{"CapEff:", "eff"}, {"CapBnd:", "bnd"}};
    for (int s = 0; s < 2; s++) {
        unsigned long long mask = cap_set(sets[s][0]);
        for (int c = 0; c < CAPS; c++)
            printf("cap.%s.%s\t%s\t%s\n", sets[s][1], cap_names[c], mask >> c & 1 ? "yes" : "no",
                   sets[s][0]);
    }
    const char *others[][2] = {{"CapAmb:", "amb"}, {"CapInh:", "inh"}};
    for (int s = 0; s < 2; s++) {
        unsigned long long mask = cap_set(others[s][0]);
        printf("cap.%s.any\t%s\t%016llx\n", others[s][1], mask ? "yes" : "no", mask);
    }
}

static void namespaces(void) {
    const char *kinds[] = {"pid", "net", "mnt", "uts", "ipc", "user", "cgroup", "time", NULL};
    for (const char **k = kinds; *k; k++) {
        char path[64];
        struct stat st;
        snprintf(path, sizeof path, "/proc/self/ns/%s", *k);
        if (stat(path, &st) == 0)
            printf("@ns.%s\t%lu\n", *k, (unsigned long)st.st_ino);
        else
            printf("@ns.%s\tabsent\n", *k);
    }
}

/* -- the run ---------------------------------------------------------------------------------- */

static const struct {
    const char *name;
    check_fn fn;
} checks[] = {
    {"syscall.io_uring_setup", c_io_uring},
    {"syscall.unshare.user", c_unshare_user},
    {"syscall.unshare.mount", c_unshare_mount},
    {"syscall.unshare.net", c_unshare_net},
    {"syscall.unshare.pid", c_unshare_pid},
    {"syscall.unshare.uts", c_unshare_uts},
    {"syscall.unshare.ipc", c_unshare_ipc},
    {"syscall.unshare.cgroup", c_unshare_cgroup},
    {"syscall.unshare.time", c_unshare_time},
    {"syscall.clone.newuser", c_clone_newuser},
    {"syscall.clone3", c_clone3},
    {"syscall.mount.tmpfs", c_mount_tmpfs},
    {"syscall.mount.bind", c_mount_bind},
    {"syscall.mount.proc", c_mount_proc},
    {"syscall.umount2", c_umount},
    {"syscall.pivot_root", c_pivot_root},
    {"syscall.fsopen", c_fsopen},
    {"syscall.open_tree", c_open_tree},
    {"syscall.mount_setattr", c_mount_setattr},
    {"syscall.move_mount", c_move_mount},
    {"keyring.get_session", c_keyctl},
    {"keyring.join_session", c_keyctl_join},
    {"keyring.add_key", c_add_key},
    {"keyring.request_key", c_request_key},
    {"syscall.bpf", c_bpf},
    {"syscall.perf_event_open", c_perf_event_open},
    {"ptrace.traceme", c_ptrace_traceme},
    {"ptrace.attach_child", c_ptrace_child},
    {"ptrace.attach_init", c_ptrace_init},
    {"ptrace.process_vm_readv", c_process_vm_readv},
    {"ptrace.kcmp", c_kcmp},
    {"syscall.kexec_load", c_kexec_load},
    {"syscall.init_module", c_init_module},
    {"syscall.finit_module", c_finit_module},
    {"syscall.delete_module", c_delete_module},
    {"syscall.settimeofday", c_settimeofday},
    {"syscall.clock_settime", c_clock_settime},
    {"syscall.swapon", c_swapon},
    {"syscall.reboot", c_reboot},
    {"syscall.acct", c_acct},
    {"syscall.quotactl", c_quotactl},
    {"syscall.open_by_handle_at", c_open_by_handle_at},
    {"syscall.name_to_handle_at", c_name_to_handle_at},
    {"syscall.userfaultfd", c_userfaultfd},
    {"syscall.fanotify_init", c_fanotify_init},
    {"syscall.iopl", c_iopl},
    {"syscall.ioperm", c_ioperm},
    {"syscall.syslog", c_syslog},
    {"syscall.setns", c_setns},
    {"syscall.chroot", c_chroot},
    {"syscall.sethostname", c_sethostname},
    {"syscall.setdomainname", c_setdomainname},
    {"syscall.personality", c_personality},
    {"syscall.get_mempolicy", c_get_mempolicy},
    {"syscall.setrlimit_raise", c_setrlimit},
    {"syscall.setpriority_raise", c_setpriority},
    {"syscall.sched_fifo", c_sched_fifo},
    {"syscall.mknod_char", c_mknod_char},
    {"syscall.chown_other", c_chown_other},
    {"syscall.socket_vsock", c_socket_vsock},
    {"dev.open_new_mem_node", c_dev_new_mem},
    {"dev.open_new_block_node", c_dev_new_block},
    {"dev.unusual_nodes", c_dev_extra_nodes},
    {"dev.kmsg", c_dev_kmsg},
    {"dev.mem", c_dev_mem},
    {"dev.kvm", c_dev_kvm},
    {"dev.net_tun", c_dev_tun},
    {"dev.fuse", c_dev_fuse},
    {"dev.devtmpfs_mounted", c_dev_devtmpfs},
    {"dev.null_chmod", c_dev_null_chmod},
    {"dev.null_chown", c_dev_null_chown},
    {"proc.kcore", c_proc_kcore},
    {"proc.keys", c_proc_keys},
    {"proc.timer_list", c_proc_timer_list},
    {"proc.sched_debug", c_proc_sched_debug},
    {"proc.latency_stats", c_proc_latency_stats},
    {"proc.acpi", c_proc_acpi},
    {"proc.scsi", c_proc_scsi},
    {"proc.asound", c_proc_asound},
    {"proc.kallsyms_addresses", c_proc_kallsyms},
    {"proc.sysrq_trigger_writable", c_proc_sysrq},
    {"proc.irq_writable", c_proc_irq},
    {"proc.sys_writable", c_proc_sys_mount},
    {"proc.init_environ", c_proc_init_environ},
    {"proc.init_mem", c_proc_init_mem},
    {"proc.seccomp_off", c_seccomp_off},
    {"proc.no_new_privs_off", c_no_new_privs_off},
    {"sysctl.kernel.core_pattern", c_core_pattern},
    {"sysctl.kernel.modprobe", c_modprobe},
    {"sysctl.kernel.sysrq", c_sysrq},
    {"sysctl.kernel.randomize_va_space", c_randomize},
    {"sysctl.kernel.kptr_restrict", c_kptr_restrict},
    {"sysctl.vm.overcommit_memory", c_overcommit},
    {"sysctl.fs.protected_symlinks", c_protected_symlinks},
    {"sysctl.user.max_user_namespaces", c_max_userns},
    {"sysctl.kernel.hostname", c_hostname_sysctl},
    {"sysctl.kernel.shmmax", c_shmmax},
    {"sysctl.net.ipv4.ip_forward", c_ip_forward},
    {"sysctl.net.core.somaxconn", c_somaxconn},
    {"sys.thp_writable", c_sys_thp},
    {"sys.uevent_helper_writable", c_sys_uevent_helper},
    {"sys.power_state_writable", c_sys_power},
    {"sys.net_mtu_writable", c_sys_net_mtu},
    {"sys.firmware", c_sys_firmware},
    {"sys.kernel_debug", c_sys_debug},
    {"sys.kernel_security", c_sys_security},
    {"sys.mounted_rw", c_sys_rw},
    {"cgroup.mkdir", c_cgroup_mkdir},
    {"cgroup.release_agent", c_cgroup_release_agent},
    {"cgroup.own_limit_writable", c_cgroup_own_limit},
    {"cgroup.mounted_rw", c_cgroup_rw},
    {"limits.no_pids_limit", c_no_pids_limit},
    {"limits.no_memory_limit", c_no_memory_limit},
    {"mount.shared_propagation", c_shared_propagation},
    {"user.root_is_host_root", c_root_is_host_root},
    {"net.interface", c_net_interface},
    {"net.default_route", c_net_route},
    {"net.packet_socket", c_net_packet},
    {"net.raw_socket", c_net_raw},
    {"net.admin", c_net_admin},
    {"net.bind_low_port", c_net_low_port},
    {"net.engine_socket", c_engine_socket},
    {"net.host_abstract_socket", c_host_abstract},
};

static int scratch(void) {
    const char *bases[] = {getenv("TMPDIR"), "/tmp", "/dev/shm", "/var/tmp", ".", NULL};
    for (int i = 0; i < 5; i++) {
        if (!bases[i]) continue;
        snprintf(workdir, sizeof workdir, "%s/pomona-probe-XXXXXX", bases[i]);
        if (mkdtemp(workdir)) return 0;
    }
    return -1;
}

int main(int argc, char **argv) {
    host_socket = argc > 1 ? argv[1] : NULL;
    setvbuf(stdout, NULL, _IONBF, 0);
    if (scratch()) {
        fprintf(stderr, "pomona-probe: no writable scratch directory\n");
        return 2;
    }
    for (size_t i = 0; i < sizeof checks / sizeof *checks; i++) {
        int pipes[2];
        if (pipe(pipes)) return 2;
        pid_t pid = fork();
        if (pid == 0) {
            char detail[DETAIL] = "";
            close(pipes[0]);
            alarm(10);
            int permitted = checks[i].fn(detail);
            dprintf(pipes[1], "%s\t%s", permitted ? "yes" : "no", detail);
            _exit(0);
        }
        close(pipes[1]);
        char answer[DETAIL + 8] = "";
        ssize_t n, total = 0;
        while ((n = read(pipes[0], answer + total, sizeof answer - 1 - total)) > 0) total += n;
        answer[total > 0 ? total : 0] = 0;
        close(pipes[0]);
        int status = 0;
        waitpid(pid, &status, 0);
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS)
            printf("%s\tno\tkilled by seccomp\n", checks[i].name);
        else if (!WIFEXITED(status) || total == 0)
            printf("%s\terror\tended with status %d\n", checks[i].name, status);
        else
            printf("%s\t%s\n", checks[i].name, answer);
    }
    capabilities();
    namespaces();
    rmdir(workdir);
    return 0;
}
