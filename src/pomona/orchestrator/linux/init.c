/* pomona-init: builds one `local` sandbox, then stays in it as its pid 1.
 *
 * The orchestrator starts it (as host root) with:
 *   stdin   its instructions, NUL-separated words (see `struct config`), ending at EOF;
 *   stdout  its report: "pid N\n" (its host pid, for the sandbox's cgroup), then "ok\n" once
 *           the sandbox is ready, or "error: WHAT: REASON\n" and it exits;
 *   a pipe it reads one byte from before it hands the sandbox over (once the orchestrator has
 *           moved it into the sandbox's cgroup); EOF there, and it exits.
 * The instructions never reach argv, which every process of the sandbox may read.
 *
 * What it makes (the reasons are in docs/security.md):
 *   - a user namespace of its own: ids 0-65535 inside are host ids BASE..BASE+65535, a range
 *     held by this sandbox alone (linux/idranges.py);
 *   - pid, mount, ipc, uts (and net) namespaces owned by the host's user namespace, so that
 *     root inside holds no capability over any of them: it cannot mount, set the hostname,
 *     configure the network or write ns_last_pid, whatever the syscall filter allows;
 *   - the root filesystem: an overlay whose layers are idmapped mounts (files owned by uid U on
 *     disk are owned by U inside, and what the sandbox writes is stored with its inside ids),
 *     mounted only in the sandbox's own mount namespace: the host's mount table never holds
 *     it, so creating a sandbox never copies another's mounts;
 *   - a private /dev (a tmpfs with its own null, zero, full, random, urandom and tty nodes,
 *     devpts, shm, mqueue), /proc with Docker's masked and read-only paths, /sys read-only;
 *   - the bind mounts asked for, read-only ones idmapped like the image.
 * Then it drops everything: it joins the sandbox's user namespace as its root with no
 * capability left, not dumpable (no process inside can read its memory or descriptors), under
 * no_new_privs and the seccomp filter, with /dev/null as stdin/stdout/stderr, and reaps orphans.
 * It keeps two descriptors for the orchestrator, which reaches them through /proc/PID/fd:
 *   fd 3  the sandbox's root filesystem alone (a detached copy of the overlay mount, with none
 *         of /proc, /dev, /sys or the bind mounts under it): the files API works there;
 *   fd 4  the overlay's upper directory: what a snapshot copies.
 *
 * Its parent stays outside every namespace of the sandbox and only waits for it, so the
 * orchestrator has a child to wait for. Built at first use, statically, with the system's cc
 * (pomona.orchestrator.linux.helpers).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/loop.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#define IDS 65536
#define MAX_ITEMS 512
#define CONFIG_MAX (1 << 20)

static const char *MASKED[] = {"/proc/asound",     "/proc/acpi",        "/proc/kcore",
                               "/proc/keys",       "/proc/latency_stats", "/proc/timer_list",
                               "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
                               "/proc/interrupts", "/sys/firmware",     "/sys/devices/virtual/powercap",
                               "/sys/kernel/debug", "/sys/kernel/security", NULL};
static const char *READ_ONLY[] = {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
                                  "/proc/sysrq-trigger", NULL};
static const struct { const char *name; int major, minor; } NODES[] = {
    {"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9},
    {"tty", 5, 0}, {NULL, 0, 0}};

struct bind { const char *source, *target; int read_only; int tree; };
struct dir { const char *path; mode_t mode; long uid; };
struct config {
    unsigned long base;           /* "ids BASE" */
    const char *dir;              /* "dir D": D/upper, D/work, D/rootfs */
    const char *disk;             /* "disk IMG": an ext4 image holding upper/ and work/ */
    const char *hostname;         /* "hostname H" */
    int filter;                   /* "seccomp FD": the program, raw BPF, in a sealed memfd */
    int go;                       /* "go FD": a byte here, once the orchestrator has moved the
                                   * init into the sandbox's cgroup; EOF: it gave up, or died */
    int own_net;                  /* "net own" (a network namespace of its own) or "net host" */
    int plain;                    /* "layers plain": in a user namespace of an ordinary user,
                                   * where nothing can be idmapped (layers are stored shifted) */
    const char *tmpdisk;          /* "tmpdisk SIZE": the writable layer on a tmpfs of that size */
    const char *lowers[MAX_ITEMS]; /* "lower P", topmost first */
    int n_lowers;
    struct bind binds[MAX_ITEMS]; /* "bind SRC DST ro|rw" */
    int n_binds;
    struct dir dirs[MAX_ITEMS];   /* "mkdir PATH MODE UID" (UID -1: the root's) */
    int n_dirs;
};

static void fail(const char *what, ...) {
    int saved = errno;
    char text[512];
    va_list args;
    va_start(args, what);
    vsnprintf(text, sizeof text, what, args);
    va_end(args);
    dprintf(1, "error: %s: %s\n", text, strerror(saved));
    _exit(1);
}

static void write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) fail("writing %s", path);
    close(fd);
}

/* -- the instructions ------------------------------------------------------------------------- */

static char *next(char **cursor, char *end) {
    if (*cursor >= end) { errno = EINVAL; fail("the instructions end early"); }
    char *word = *cursor;
    *cursor += strlen(word) + 1;
    return word;
}

static void read_config(struct config *c) {
    char *buffer = malloc(CONFIG_MAX);
    size_t size = 0;
    ssize_t n;
    if (!buffer) fail("malloc");
    while ((n = read(0, buffer + size, CONFIG_MAX - 1 - size)) > 0) size += n;
    if (n < 0) fail("reading the instructions");
    buffer[size] = 0;
    char *cursor = buffer, *end = buffer + size;
    memset(c, 0, sizeof *c);
    while (cursor < end) {
        char *key = next(&cursor, end);
        if (!strcmp(key, "ids")) c->base = strtoul(next(&cursor, end), NULL, 10);
        else if (!strcmp(key, "dir")) c->dir = next(&cursor, end);
        else if (!strcmp(key, "disk")) c->disk = next(&cursor, end);
        else if (!strcmp(key, "hostname")) c->hostname = next(&cursor, end);
        else if (!strcmp(key, "seccomp")) c->filter = atoi(next(&cursor, end));
        else if (!strcmp(key, "go")) c->go = atoi(next(&cursor, end));
        else if (!strcmp(key, "net")) c->own_net = !strcmp(next(&cursor, end), "own");
        else if (!strcmp(key, "layers")) c->plain = !strcmp(next(&cursor, end), "plain");
        else if (!strcmp(key, "tmpdisk")) c->tmpdisk = next(&cursor, end);
        else if (!strcmp(key, "lower") && c->n_lowers < MAX_ITEMS) c->lowers[c->n_lowers++] = next(&cursor, end);
        else if (!strcmp(key, "bind") && c->n_binds < MAX_ITEMS) {
            struct bind *b = &c->binds[c->n_binds++];
            b->source = next(&cursor, end);
            b->target = next(&cursor, end);
            b->read_only = !strcmp(next(&cursor, end), "ro");
        } else if (!strcmp(key, "mkdir") && c->n_dirs < MAX_ITEMS) {
            struct dir *d = &c->dirs[c->n_dirs++];
            d->path = next(&cursor, end);
            d->mode = strtoul(next(&cursor, end), NULL, 8);
            d->uid = strtol(next(&cursor, end), NULL, 10);
        } else { errno = EINVAL; fail("instruction %s", key); }
    }
    if (!c->dir || !c->base || !c->n_lowers || c->filter < 3 || c->go < 3) { errno = EINVAL; fail("the instructions lack ids, dir, lower, seccomp or go"); }
}

/* -- namespaces and ids ------------------------------------------------------------------------ */

/* A user namespace mapping 0-65535 to BASE..: made by a throwaway child, mapped from here. */
static int make_userns(unsigned long base) {
    int hold[2];
    if (pipe2(hold, O_CLOEXEC)) fail("pipe");
    pid_t child = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
    if (child < 0) fail("clone(CLONE_NEWUSER)");
    if (child == 0) {
        char byte;
        close(hold[1]);
        while (read(hold[0], &byte, 1) < 0 && errno == EINTR) {}
        _exit(0);
    }
    close(hold[0]);
    char path[64], map[64];
    snprintf(map, sizeof map, "0 %lu %d\n", base, IDS);
    snprintf(path, sizeof path, "/proc/%d/uid_map", child);
    write_file(path, map);
    snprintf(path, sizeof path, "/proc/%d/gid_map", child);
    write_file(path, map);
    snprintf(path, sizeof path, "/proc/%d/ns/user", child);
    int ns = open(path, O_RDONLY | O_CLOEXEC);
    if (ns < 0) fail("opening %s", path);
    close(hold[1]);
    waitpid(child, NULL, 0);
    return ns;
}

static void set_caps(int all) {
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &header, data)) fail("capget");
    for (int i = 0; i < 2; i++) {
        data[i].effective = all ? data[i].permitted : 0;
        if (!all) data[i].permitted = data[i].inheritable = 0;
    }
    if (syscall(SYS_capset, &header, data)) fail("capset");
}

/* The host's root, acting as the sandbox's root for everything it creates (the overlay's own
 * work files included): fsuid/fsgid BASE, every capability kept effective. */
static void create_as_inside_root(unsigned long base) {
    setfsgid(base);
    setfsuid(base);
    unsigned long now = (uid_t)setfsuid(-1);
    if (now != base) { errno = EPERM; fail("setfsuid(%lu) left %lu", base, now); }
    set_caps(1);
}

static void loopback_up(const struct config *c) {
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq ifr = {0};
    strcpy(ifr.ifr_name, "lo");
    if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr)) fail("loopback");
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (ioctl(s, SIOCSIFFLAGS, &ifr)) fail("bringing loopback up");
    close(s);
    /* what Docker sets in a container's own network namespace: root inside holds no capability
     * over it, so low ports and ICMP echo sockets are opened up for every id instead */
    write_file("/proc/sys/net/ipv4/ip_unprivileged_port_start", "0");
    char groups[64]; /* every group the sandbox has (groups this namespace maps, at most) */
    snprintf(groups, sizeof groups, "0 %lu", c->plain ? c->base + IDS - 1 : 2147483647UL);
    write_file("/proc/sys/net/ipv4/ping_group_range", groups);
}

/* -- mounts -------------------------------------------------------------------------------------- */

static int clone_tree(const char *path, int recursive) {
    int fd = open_tree(AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (recursive ? AT_RECURSIVE : 0));
    if (fd < 0) fail("open_tree %s", path);
    return fd;
}

static int set_attr(int tree, unsigned long long set, int userns, int recursive) {
    struct mount_attr attr = {.attr_set = set, .userns_fd = userns};
    return mount_setattr(tree, "", AT_EMPTY_PATH | (recursive ? AT_RECURSIVE : 0), &attr, sizeof attr);
}

/* An idmapped copy of a layer (userns -1: a plain copy) as a detached mount, which lives while
 * its fd is open, so the caller keeps it until the overlay is made; and, in *dir, a directory fd
 * on it for fsconfig (which takes no O_PATH descriptor). */
static int idmapped_layer(const char *path, int userns, int required, int *dir) {
    int tree = clone_tree(path, 0);
    if (userns >= 0 && set_attr(tree, MOUNT_ATTR_IDMAP, userns, 0) && (required || errno != EINVAL))
        fail("idmapping %s", path);
    /* EINVAL: a filesystem that cannot be idmapped; its files show as the overflow id inside */
    *dir = openat(tree, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (*dir < 0) fail("opening %s", path);
    return tree;
}

static void attach_loop(const char *image, const char *target) {
    int file = open(image, O_RDWR | O_CLOEXEC), control = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (file < 0 || control < 0) fail("opening %s", image);
    for (int tries = 0;; tries++) {
        int number = ioctl(control, LOOP_CTL_GET_FREE);
        if (number < 0) fail("LOOP_CTL_GET_FREE");
        char device[32];
        snprintf(device, sizeof device, "/dev/loop%d", number);
        int loop = open(device, O_RDWR | O_CLOEXEC);
        if (loop < 0) fail("opening %s", device);
        struct loop_config config = {.fd = file, .info = {.lo_flags = LO_FLAGS_AUTOCLEAR}};
        if (ioctl(loop, LOOP_CONFIGURE, &config) == 0) {
            /* noinit_itable: the image is a fresh mkfs, its inode tables already read as zeros;
               zeroing them again would unshare the blocks it shares with its template */
            if (mount(device, target, "ext4", MS_NOSUID | MS_NODEV, "noinit_itable"))
                fail("mounting the disk");
            close(loop); /* the mount holds the device now; it detaches when that goes */
            break;
        }
        if (errno != EBUSY || tries > 100) fail("LOOP_CONFIGURE");
        close(loop); /* another process took that device first */
    }
    close(file);
    close(control);
}

/* The overlay, from idmapped layers, attached at D/rootfs; returns an fd on its upper dir. */
static int mount_root(const struct config *c, int userns) {
    char writable[4096], rootfs[4096];
    snprintf(rootfs, sizeof rootfs, "%s/rootfs", c->dir);
    if (c->disk || c->tmpdisk) {
        snprintf(writable, sizeof writable, "%s/disk", c->dir);
        if (c->disk) {
            attach_loop(c->disk, writable);
        } else {
            char options[64];
            snprintf(options, sizeof options, "size=%s,mode=0755", c->tmpdisk);
            if (mount("tmpfs", writable, "tmpfs", MS_NOSUID | MS_NODEV, options)) fail("mounting the disk");
        }
        char sub[4200];
        for (int i = 0; i < 2; i++) {
            snprintf(sub, sizeof sub, "%s/%s", writable, i ? "work" : "upper");
            if (mkdir(sub, 0755) && errno != EEXIST) fail("mkdir %s", sub);
        }
    } else {
        snprintf(writable, sizeof writable, "%s", c->dir);
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/upper", writable);
    /* what a snapshot copies: the upper layer as stored (inside ids), not through the idmap */
    int plain_upper = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (plain_upper < 0) fail("opening %s", path);
    /* the overlay's root is the upper directory's: root inside owns it (through the idmap, or
     * stored as the inside root's id where nothing is idmapped) */
    if (c->plain && chown(path, c->base, c->base)) fail("chown %s", path);
    create_as_inside_root(c->base);
    int fs = fsopen("overlay", FSOPEN_CLOEXEC);
    if (fs < 0) fail("fsopen overlay");
    if (fsconfig(fs, FSCONFIG_SET_STRING, "source", "pomona", 0)) fail("overlay source");
    int trees[MAX_ITEMS + 1], dir;
    if (c->plain && fsconfig(fs, FSCONFIG_SET_FLAG, "userxattr", NULL, 0)) fail("overlay userxattr");
    for (int i = 0; i < c->n_lowers; i++) {
        trees[i] = idmapped_layer(c->lowers[i], c->plain ? -1 : userns, 0, &dir);
        if (fsconfig(fs, FSCONFIG_SET_FD, "lowerdir+", NULL, dir)) fail("lower layer %s", c->lowers[i]);
        close(dir);
    }
    /* upper and work share one mount, as overlayfs requires */
    trees[c->n_lowers] = idmapped_layer(writable, c->plain ? -1 : userns, 1, &dir);
    int upper = openat(dir, "upper", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int work = openat(dir, "work", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (upper < 0 || work < 0) fail("opening %s/upper and work", writable);
    close(dir);
    if (fsconfig(fs, FSCONFIG_SET_FD, "upperdir", NULL, upper)) fail("upper layer");
    if (fsconfig(fs, FSCONFIG_SET_FD, "workdir", NULL, work)) fail("work directory");
    if (fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0)) {
        char log[512] = "";
        ssize_t n = read(fs, log, sizeof log - 1);
        log[n > 0 ? n : 0] = 0;
        fail("overlay (%s)", log);
    }
    int root = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NODEV);
    if (root < 0) fail("fsmount");
    if (move_mount(root, "", AT_FDCWD, rootfs, MOVE_MOUNT_F_EMPTY_PATH)) fail("attaching the root");
    close(root);
    close(fs);
    close(work);
    close(upper);
    for (int i = 0; i <= c->n_lowers; i++) close(trees[i]);
    return plain_upper;
}

/* mkdir -p inside the new root (already pivoted into: a symlink cannot lead out of it). */
static void make_dirs(const char *path, mode_t mode) {
    char partial[4096];
    snprintf(partial, sizeof partial, "%s", path);
    for (char *p = partial + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(partial, 0755) && errno != EEXIST) fail("mkdir %s", partial);
        *p = '/';
    }
    if (mkdir(partial, mode) && errno != EEXIST) fail("mkdir %s", partial);
}

static void attach(int tree, const char *target) {
    if (move_mount(tree, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH)) fail("mounting on %s", target);
    close(tree);
}

/* The special filesystems go on real directories only: an image or a snapshot may have made
 * /proc a symlink, and a mount through it would land wherever it points. */
static void real_dir(const char *path) {
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISDIR(st.st_mode)) { errno = ENOTDIR; fail("%s in the image", path); }
    if (mkdir(path, 0755) && errno != EEXIST) fail("mkdir %s", path);
}

/* The kernel filesystems, made while the host's own are still in view (a user namespace may
 * only mount a procfs or sysfs where one is fully visible already), attached after the pivot. */
struct kernel_fs { int proc, sys, nodes[6]; };

static int new_mount(const char *type, unsigned long long attrs) {
    int fs = fsopen(type, FSOPEN_CLOEXEC);
    if (fs < 0 || fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0)) return -1;
    int mnt = fsmount(fs, FSMOUNT_CLOEXEC, attrs);
    close(fs);
    return mnt;
}

static struct kernel_fs make_kernel_filesystems(const struct config *c) {
    struct kernel_fs k;
    k.proc = new_mount("proc", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
    if (k.proc < 0) fail("making /proc");
    const unsigned long long ro = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
    k.sys = new_mount("sysfs", ro);
    if (k.sys < 0) { /* the host's network namespace, which an ordinary user's cannot mount: */
        k.sys = clone_tree("/sys", 1); /* its /sys, read-only */
        if (set_attr(k.sys, ro, -1, 1)) fail("read-only /sys");
    }
    for (int i = 0; NODES[i].name; i++) { /* where no node can be made: the host's, bound */
        char path[64];
        snprintf(path, sizeof path, "/dev/%s", NODES[i].name);
        k.nodes[i] = c->plain ? clone_tree(path, 0) : -1;
    }
    return k;
}

static void mount_dev(unsigned long base, const struct kernel_fs *k) {
    char options[128];
    real_dir("/dev");
    snprintf(options, sizeof options, "mode=0755,size=65536k,uid=%lu,gid=%lu", base, base);
    if (mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_STRICTATIME, options)) fail("mounting /dev");
    for (int i = 0; NODES[i].name; i++) {
        char path[64];
        snprintf(path, sizeof path, "/dev/%s", NODES[i].name);
        if (k->nodes[i] >= 0) { /* root inside owns nothing of the host: it cannot chmod it */
            int file = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
            if (file < 0) fail("creating %s", path);
            close(file);
            attach(k->nodes[i], path);
            continue;
        }
        if (mknod(path, S_IFCHR | 0666, makedev(NODES[i].major, NODES[i].minor))) fail("mknod %s", path);
        if (chmod(path, 0666)) fail("chmod %s", path); /* past the umask */
    }
    const char *links[][2] = {{"/proc/self/fd", "/dev/fd"}, {"/proc/self/fd/0", "/dev/stdin"},
                              {"/proc/self/fd/1", "/dev/stdout"}, {"/proc/self/fd/2", "/dev/stderr"},
                              {"pts/ptmx", "/dev/ptmx"}, {"/proc/kcore", "/dev/core"}};
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++)
        if (symlink(links[i][0], links[i][1])) fail("symlink %s", links[i][1]);
    for (int i = 0; i < 3; i++) {
        const char *sub = (const char *[]){"/dev/pts", "/dev/shm", "/dev/mqueue"}[i];
        if (mkdir(sub, 0755)) fail("mkdir %s", sub);
    }
    snprintf(options, sizeof options, "newinstance,ptmxmode=0666,mode=0620,gid=%lu", base + 5);
    if (mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, options)) fail("mounting /dev/pts");
    snprintf(options, sizeof options, "mode=1777,size=65536k,uid=%lu,gid=%lu", base, base);
    if (mount("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options)) fail("mounting /dev/shm");
    if (mount("mqueue", "/dev/mqueue", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL)) fail("mounting /dev/mqueue");
}

/* Docker's defaults: masked paths show nothing (an empty read-only tmpfs, or /dev/null), the
 * read-only ones are bound read-only over themselves. */
static void mask_kernel_paths(void) {
    for (int i = 0; MASKED[i]; i++) {
        struct stat st;
        if (stat(MASKED[i], &st)) continue;
        if (S_ISDIR(st.st_mode)) {
            if (mount("tmpfs", MASKED[i], "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=0"))
                fail("masking %s", MASKED[i]);
        } else {
            attach(clone_tree("/dev/null", 0), MASKED[i]);
        }
    }
    for (int i = 0; READ_ONLY[i]; i++) {
        struct stat st;
        if (stat(READ_ONLY[i], &st)) continue;
        int tree = clone_tree(READ_ONLY[i], 1);
        if (set_attr(tree, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, -1, 1))
            fail("read-only %s", READ_ONLY[i]);
        attach(tree, READ_ONLY[i]);
    }
}

static void mount_kernel_filesystems(unsigned long base, const struct kernel_fs *k) {
    mount_dev(base, k);
    real_dir("/proc");
    attach(k->proc, "/proc");
    real_dir("/sys");
    attach(k->sys, "/sys");
    mask_kernel_paths();
}

/* -- dropping everything ---------------------------------------------------------------------- */

static struct sock_fprog read_filter(int fd) {
    struct stat st;
    if (fstat(fd, &st) || st.st_size <= 0 || st.st_size % sizeof(struct sock_filter) || st.st_size > 65536 * 8) {
        errno = EINVAL;
        fail("the seccomp program");
    }
    struct sock_filter *code = malloc(st.st_size);
    if (!code) fail("malloc");
    for (off_t done = 0; done < st.st_size;) {
        ssize_t n = pread(fd, (char *)code + done, st.st_size - done, done);
        if (n <= 0) fail("reading the seccomp program");
        done += n;
    }
    close(fd);
    return (struct sock_fprog){.len = st.st_size / sizeof(struct sock_filter), .filter = code};
}

static void become_powerless(int userns, struct sock_fprog *filter) {
    if (setns(userns, CLONE_NEWUSER)) fail("joining the user namespace");
    for (int cap = 0; cap < 64; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) && errno != EINVAL) fail("dropping capability %d", cap);
    if (setgroups(0, NULL) || setresgid(0, 0, 0) || setresuid(0, 0, 0)) fail("becoming root inside");
    set_caps(0);
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) fail("PR_SET_DUMPABLE");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) fail("no_new_privs");
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, filter, 0, 0)) fail("seccomp");
}

static void reap_forever(void) {
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, NULL);
    sigset_t child;
    sigemptyset(&child);
    sigaddset(&child, SIGCHLD);
    for (;;) {
        while (waitpid(-1, NULL, WNOHANG) > 0) {}
        sigwaitinfo(&child, NULL);
    }
}

/* Moves fd above the numbers being handed out (3 and 4 are held for the orchestrator). */
static int high(int fd) {
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, 100);
    if (moved < 0) fail("fcntl");
    close(fd);
    return moved;
}

/* pid 1, still the host's root, in fresh mount, ipc, uts (and net) namespaces. */
static void build(const struct config *c, int userns, int filter_fd) {
    char self[32] = "";
    if (readlink("/proc/self", self, sizeof self - 1) < 0) fail("reading /proc/self");
    dprintf(1, "pid %s\n", self); /* the host's procfs: the host's pid */
    struct sock_fprog filter = read_filter(filter_fd);
    if (c->hostname && sethostname(c->hostname, strlen(c->hostname))) fail("sethostname");
    if (c->own_net) loopback_up(c);
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) fail("making mounts private");
    int upper = mount_root(c, userns);
    struct kernel_fs kernel = make_kernel_filesystems(c);
    int binds[MAX_ITEMS];
    for (int i = 0; i < c->n_binds; i++) { /* host paths: opened before the host's tree goes */
        const struct bind *b = &c->binds[i];
        binds[i] = clone_tree(b->source, 1);
        unsigned long long attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (b->read_only ? MOUNT_ATTR_RDONLY : 0);
        if (set_attr(binds[i], attrs, -1, 1)) fail("flags of %s", b->source);
        if (b->read_only && !c->plain && set_attr(binds[i], MOUNT_ATTR_IDMAP, userns, 1) && errno != EINVAL)
            fail("idmapping %s", b->source);
    }
    char rootfs[4096];
    snprintf(rootfs, sizeof rootfs, "%s/rootfs", c->dir);
    if (chdir(rootfs) || syscall(SYS_pivot_root, ".", ".") || umount2(".", MNT_DETACH) || chdir("/"))
        fail("entering the root");
    for (int i = 0; i < c->n_dirs; i++) {
        const struct dir *d = &c->dirs[i];
        make_dirs(d->path, d->mode);
        unsigned long owner = c->base + (d->uid < 0 ? 0 : d->uid);
        if (chown(d->path, owner, owner) || chmod(d->path, d->mode)) fail("preparing %s", d->path);
    }
    for (int i = 0; i < c->n_binds; i++) {
        struct stat st;
        if (fstat(binds[i], &st)) fail("stat %s", c->binds[i].source);
        if (S_ISDIR(st.st_mode)) {
            make_dirs(c->binds[i].target, 0755);
        } else {
            int file = open(c->binds[i].target, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
            if (file < 0) fail("creating %s", c->binds[i].target);
            close(file);
        }
        attach(binds[i], c->binds[i].target);
    }
    int view = clone_tree("/", 0); /* before anything is mounted over the overlay */
    mount_kernel_filesystems(c->base, &kernel);
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0) fail("opening /dev/null");
    char byte;
    if (read(c->go, &byte, 1) != 1) _exit(1); /* the orchestrator gave up on this sandbox */
    close(c->go);
    view = high(view), upper = high(upper), null = high(null), userns = high(userns);
    if (dup2(view, 3) != 3 || dup2(upper, 4) != 4) fail("dup2");
    become_powerless(userns, &filter);
    dprintf(1, "ok\n");
    for (int fd = 0; fd < 3; fd++) dup2(null, fd);
    syscall(SYS_close_range, 5, ~0U, 0);
    setsid();
    reap_forever();
}

/* -- an ordinary user's namespace ------------------------------------------------------------- */

/* `pomona-init hold`: the user namespace the local runtime runs in for an ordinary user (its
 * uid as 0, its subordinate ids as 1-65536), held while this process lives. It reports "ready",
 * waits for a byte on stdin once the orchestrator has mapped its ids (newuidmap, newgidmap),
 * becomes root in it, reports "ok" and sleeps. */
static int hold_user_namespace(void) {
    if (unshare(CLONE_NEWUSER)) fail("unshare(CLONE_NEWUSER)");
    dprintf(1, "ready\n");
    char byte;
    if (read(0, &byte, 1) != 1) _exit(1);
    if (setresgid(0, 0, 0) || setresuid(0, 0, 0)) fail("becoming root in the user namespace");
    dprintf(1, "ok\n");
    syscall(SYS_close_range, 0, ~0U, 0);
    setsid();
    sigset_t none;
    sigemptyset(&none);
    for (;;) sigsuspend(&none);
}

/* `pomona-init enter PID PROGRAM [ARG...]`: PROGRAM as root in the user namespace PID holds. */
static int enter_user_namespace(const char *pid, char **argv) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%s/ns/user", pid);
    int ns = open(path, O_RDONLY | O_CLOEXEC);
    if (ns < 0 || setns(ns, CLONE_NEWUSER)) fail("joining the user namespace of %s", pid);
    if (setgroups(0, NULL) || setresgid(0, 0, 0) || setresuid(0, 0, 0)) fail("becoming root");
    execvp(argv[0], argv);
    fail("running %s", argv[0]);
    return 127;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "hold")) return hold_user_namespace();
    if (argc > 3 && !strcmp(argv[1], "enter")) return enter_user_namespace(argv[2], argv + 3);
    static struct config config;
    read_config(&config);
    int userns = make_userns(config.base);
    if (unshare(CLONE_NEWPID)) fail("unshare(CLONE_NEWPID)");
    pid_t init = fork();
    if (init < 0) fail("fork");
    if (init == 0) {
        int flags = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | (config.own_net ? CLONE_NEWNET : 0);
        if (unshare(flags)) fail("unshare");
        build(&config, userns, config.filter);
    }
    /* the parent: in none of the sandbox's namespaces, holding nothing, waiting for its init */
    syscall(SYS_close_range, 0, ~0U, 0);
    int status;
    while (waitpid(init, &status, 0) < 0)
        if (errno != EINTR) return 1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
