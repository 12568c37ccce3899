/*
 * How fast this machine's memcpy copies a block between addresses that differ modulo 16.
 *
 *   cc -O2 bench/memcpy-alignment.c -o /tmp/memcpy-alignment
 *   /tmp/memcpy-alignment 16384 13 0    # size, destination offset, source offset
 *   GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=4294967295 /tmp/memcpy-alignment 16384 13 0
 *
 * The second run keeps glibc from copying with `rep movsb`; see BENCHMARKS.md, "Large
 * responses over TLS".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s SIZE DST_OFFSET SRC_OFFSET\n", argv[0]);
        return 2;
    }
    size_t n = strtoul(argv[1], NULL, 10);
    size_t dst_off = strtoul(argv[2], NULL, 10), src_off = strtoul(argv[3], NULL, 10);
    size_t room = n + 4096;
    char *src = aligned_alloc(4096, room), *dst = aligned_alloc(4096, room);
    if (!src || !dst || dst_off > 4096 || src_off > 4096) {
        fprintf(stderr, "bad size or offsets\n");
        return 2;
    }
    memset(src, 1, room);
    memset(dst, 2, room);
    const long rounds = 200000;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < rounds; i++) {
        memcpy(dst + dst_off, src + src_off, n);
        __asm__ volatile("" : : "r"(dst) : "memory");
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
    printf("%zu bytes, destination +%zu, source +%zu: %.1f ns a copy, %.2f GB/s\n", n, dst_off,
           src_off, ns / rounds, n * rounds / ns);
    return 0;
}
