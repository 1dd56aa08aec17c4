/* The hypervisor side of the lazy Xen pager, in C: Xen's public tool headers (xenctrl.h and what it includes)
 * do not compile as C++ (GNU anonymous unions, the foreign-structure FIXME macros), so everything that
 * includes them lives in xen_pager_hv.c behind this small interface. Built only with HALITE_XEN_PAGER.
 *
 * Facts from Xen 4.17's public headers and tools/xenpaging (read, not copied): the paging ring is the page named by
 * HVM_PARAM_PAGING_RING_PFN (populated if absent), enabled with xc_mem_paging_enable(), which returns the event
 * channel port; requests are vm_event_request_t with reason VM_EVENT_REASON_MEM_PAGING; a response echoes the
 * gfn, the vCPU and the flags (VM_EVENT_FLAG_VCPU_PAUSED unpauses the vCPU) and is signalled on the channel.
 * xc_mem_paging_load() prepares a paged-out gfn with a buffer and makes it guest-accessible at once. */
#ifndef HALITE_XEN_PAGER_XEN_PAGER_HV_H_
#define HALITE_XEN_PAGER_XEN_PAGER_HV_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hlt_xen_paging hlt_xen_paging;

typedef struct {
  uint64_t gfn;
  uint32_t vcpu_id;
  uint32_t flags;        /* VM_EVENT_FLAG_*, echoed */
  uint32_t paging_flags; /* MEM_PAGING_* */
} hlt_xen_paging_req;

enum { HLT_MEM_PAGING_DROP_PAGE = 1 << 0, HLT_MEM_PAGING_EVICT_FAIL = 1 << 1 };

/* 0 when a hypervisor answers (its version in `msg`), -1 when none does (why, in `msg`). */
int hlt_xen_probe(char *msg, size_t msg_len);

/* Maps and initialises the paging ring of `domid`, enables paging, binds the event channel. NULL on failure,
 * with the step and errno text in `err` (ENOSYS/EOPNOTSUPP: the hypervisor lacks CONFIG_MEM_PAGING). */
hlt_xen_paging *hlt_xen_paging_attach(uint32_t domid, char *err, size_t err_len);
/* Disables paging (when `disable`), unbinds, unmaps, closes. */
void hlt_xen_paging_detach(hlt_xen_paging *p, int disable);

/* 0 paged out, 1 refused because in use (EBUSY), -errno otherwise. */
int hlt_xen_paging_evict(hlt_xen_paging *p, uint64_t gfn);
/* 0 or -errno (retries ENOMEM a few times). */
int hlt_xen_paging_load(hlt_xen_paging *p, uint64_t gfn, const void *page);
/* Writes a resident page through a foreign mapping. 0 or -errno. */
int hlt_xen_paging_write(hlt_xen_paging *p, uint64_t gfn, const void *page);
/* Puts the response on the ring and notifies. 0 or -errno. */
int hlt_xen_paging_respond(hlt_xen_paging *p, const hlt_xen_paging_req *req);
/* Waits up to timeout_ms (0: do not wait) for the event channel, then takes up to `max` requests off the ring.
 * Returns how many, or -errno. */
int hlt_xen_paging_wait(hlt_xen_paging *p, int timeout_ms, hlt_xen_paging_req *reqs, int max);
int hlt_xen_paging_unpause(hlt_xen_paging *p);

#ifdef __cplusplus
}
#endif

#endif /* HALITE_XEN_PAGER_XEN_PAGER_HV_H_ */
