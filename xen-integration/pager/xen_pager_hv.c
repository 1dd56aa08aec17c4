/* The hypervisor side of the lazy Xen pager (xen_pager_hv.h). Written from Xen 4.17's public headers
 * (xenctrl.h, xenevtchn.h, xenforeignmemory.h, xen/vm_event.h, xen/io/ring.h) and the behaviour of
 * xen/arch/x86/mm/mem_paging.c and xen/common/vm_event.c; no Xen code is copied. Never run on a real Xen. */
#include "xen_pager_hv.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <xenctrl.h>
#include <xenevtchn.h>
#include <xenforeignmemory.h>
#include <xen/hvm/params.h>
#include <xen/vm_event.h>

struct hlt_xen_paging {
  uint32_t domid;
  xc_interface *xch;
  xenforeignmemory_handle *fmem;
  xenevtchn_handle *xce;
  evtchn_port_t remote_port;
  int local_port;
  void *ring_page;
  vm_event_back_ring_t back;
  int enabled;
};

static void set_msg(char *buf, size_t len, const char *what, int err) {
  if (!buf || !len) return;
  if (err)
    snprintf(buf, len, "%s: %s", what, strerror(err));
  else
    snprintf(buf, len, "%s", what);
}

int hlt_xen_probe(char *msg, size_t msg_len) {
  if (access("/dev/xen/privcmd", F_OK) != 0 && access("/proc/xen/privcmd", F_OK) != 0) {
    set_msg(msg, msg_len, "no hypervisor: neither /dev/xen/privcmd nor /proc/xen/privcmd exists (not a Xen dom0)", 0);
    return -1;
  }
  xc_interface *xch = xc_interface_open(NULL, NULL, 0);
  if (!xch) {
    set_msg(msg, msg_len, "no hypervisor: xc_interface_open failed", errno);
    return -1;
  }
  int version = xc_version(xch, XENVER_version, NULL);
  if (version < 0) {
    set_msg(msg, msg_len, "no hypervisor: xc_version failed", errno);
    xc_interface_close(xch);
    return -1;
  }
  snprintf(msg, msg_len,
           "Xen %d.%d answers; whether it was built with CONFIG_MEM_PAGING shows only when paging is enabled on "
           "a domain (ENOSYS or EOPNOTSUPP otherwise; Debian's hypervisor is built without it)",
           version >> 16, version & 0xffff);
  xc_interface_close(xch);
  return 0;
}

hlt_xen_paging *hlt_xen_paging_attach(uint32_t domid, char *err, size_t err_len) {
  hlt_xen_paging *p = calloc(1, sizeof *p);
  if (!p) {
    set_msg(err, err_len, "out of memory", ENOMEM);
    return NULL;
  }
  p->domid = domid;
  p->local_port = -1;
  p->xch = xc_interface_open(NULL, NULL, 0);
  if (!p->xch) {
    set_msg(err, err_len, "xc_interface_open", errno);
    goto fail;
  }
  p->fmem = xenforeignmemory_open(NULL, 0);
  if (!p->fmem) {
    set_msg(err, err_len, "xenforeignmemory_open", errno);
    goto fail;
  }
  /* The ring lives in a guest frame named by an HVM parameter; populate it when the domain has none there. */
  uint64_t ring_pfn = 0;
  if (xc_hvm_param_get(p->xch, domid, HVM_PARAM_PAGING_RING_PFN, &ring_pfn) != 0) {
    set_msg(err, err_len, "reading HVM_PARAM_PAGING_RING_PFN", errno);
    goto fail;
  }
  xen_pfn_t pfn = (xen_pfn_t)ring_pfn;
  int map_err = 0;
  p->ring_page = xenforeignmemory_map(p->fmem, domid, PROT_READ | PROT_WRITE, 1, &pfn, &map_err);
  if (!p->ring_page || map_err) {
    if (p->ring_page) xenforeignmemory_unmap(p->fmem, p->ring_page, 1);
    p->ring_page = NULL;
    if (xc_domain_populate_physmap_exact(p->xch, domid, 1, 0, 0, &pfn) != 0) {
      set_msg(err, err_len, "populating the paging ring frame", errno);
      goto fail;
    }
    p->ring_page = xenforeignmemory_map(p->fmem, domid, PROT_READ | PROT_WRITE, 1, &pfn, &map_err);
    if (!p->ring_page || map_err) {
      int e = !p->ring_page ? errno : (map_err < 0 ? -map_err : map_err);
      if (p->ring_page) xenforeignmemory_unmap(p->fmem, p->ring_page, 1);
      p->ring_page = NULL;
      set_msg(err, err_len, "mapping the paging ring frame", e);
      goto fail;
    }
  }
  uint32_t port = 0;
  if (xc_mem_paging_enable(p->xch, domid, &port) != 0) {
    int e = errno;
    const char *why = e == ENOSYS || e == EOPNOTSUPP ? "xc_mem_paging_enable (the hypervisor lacks CONFIG_MEM_PAGING)"
                      : e == ENODEV                 ? "xc_mem_paging_enable (needs hardware-assisted paging)"
                      : e == EMLINK                 ? "xc_mem_paging_enable (not with IOMMU passthrough)"
                      : e == EXDEV                  ? "xc_mem_paging_enable (not with populate-on-demand)"
                      : e == EBUSY                  ? "xc_mem_paging_enable (a pager is or was attached)"
                                                    : "xc_mem_paging_enable";
    set_msg(err, err_len, why, e);
    goto fail;
  }
  p->enabled = 1;
  p->remote_port = port;
  p->xce = xenevtchn_open(NULL, 0);
  if (!p->xce) {
    set_msg(err, err_len, "xenevtchn_open", errno);
    goto fail;
  }
  p->local_port = xenevtchn_bind_interdomain(p->xce, domid, p->remote_port);
  if (p->local_port < 0) {
    set_msg(err, err_len, "xenevtchn_bind_interdomain", errno);
    goto fail;
  }
  SHARED_RING_INIT((vm_event_sring_t *)p->ring_page);
  BACK_RING_INIT(&p->back, (vm_event_sring_t *)p->ring_page, XC_PAGE_SIZE);
  /* The guest must not see or reuse the ring frame. Failure here is not fatal (xenpaging only warns). */
  (void)xc_domain_decrease_reservation_exact(p->xch, domid, 1, 0, &pfn);
  return p;

fail:
  hlt_xen_paging_detach(p, 1);
  return NULL;
}

void hlt_xen_paging_detach(hlt_xen_paging *p, int disable) {
  if (!p) return;
  if (p->enabled && disable) (void)xc_mem_paging_disable(p->xch, p->domid);
  if (p->xce) {
    if (p->local_port >= 0) (void)xenevtchn_unbind(p->xce, (evtchn_port_t)p->local_port);
    xenevtchn_close(p->xce);
  }
  if (p->ring_page) xenforeignmemory_unmap(p->fmem, p->ring_page, 1);
  if (p->fmem) xenforeignmemory_close(p->fmem);
  if (p->xch) xc_interface_close(p->xch);
  free(p);
}

int hlt_xen_paging_evict(hlt_xen_paging *p, uint64_t gfn) {
  if (xc_mem_paging_nominate(p->xch, p->domid, gfn) != 0) return errno == EBUSY ? 1 : -errno;
  if (xc_mem_paging_evict(p->xch, p->domid, gfn) != 0) return errno == EBUSY ? 1 : -errno;
  return 0;
}

int hlt_xen_paging_load(hlt_xen_paging *p, uint64_t gfn, const void *page) {
  for (int attempt = 0;; ++attempt) {
    if (xc_mem_paging_load(p->xch, p->domid, gfn, (void *)page) == 0) return 0;
    if (errno != ENOMEM || attempt == 50) return -errno;
    usleep(20000); /* the host is short of memory: wait for the balloon or the scrubber */
  }
}

int hlt_xen_paging_write(hlt_xen_paging *p, uint64_t gfn, const void *page) {
  xen_pfn_t pfn = (xen_pfn_t)gfn;
  int map_err = 0;
  void *dst = xenforeignmemory_map(p->fmem, p->domid, PROT_READ | PROT_WRITE, 1, &pfn, &map_err);
  if (!dst) return -errno;
  if (map_err) {
    xenforeignmemory_unmap(p->fmem, dst, 1);
    return map_err < 0 ? map_err : -map_err;
  }
  memcpy(dst, page, XC_PAGE_SIZE);
  xenforeignmemory_unmap(p->fmem, dst, 1);
  return 0;
}

int hlt_xen_paging_respond(hlt_xen_paging *p, const hlt_xen_paging_req *req) {
  vm_event_response_t rsp;
  memset(&rsp, 0, sizeof rsp);
  rsp.version = VM_EVENT_INTERFACE_VERSION; /* the hypervisor drops responses of another version */
  rsp.reason = VM_EVENT_REASON_MEM_PAGING;
  rsp.vcpu_id = req->vcpu_id;
  rsp.flags = req->flags;
  rsp.u.mem_paging.gfn = req->gfn;
  rsp.u.mem_paging.flags = req->paging_flags;
  RING_IDX prod = p->back.rsp_prod_pvt;
  memcpy(RING_GET_RESPONSE(&p->back, prod), &rsp, sizeof rsp);
  p->back.rsp_prod_pvt = prod + 1;
  RING_PUSH_RESPONSES(&p->back);
  return xenevtchn_notify(p->xce, (evtchn_port_t)p->local_port) == 0 ? 0 : -errno;
}

int hlt_xen_paging_wait(hlt_xen_paging *p, int timeout_ms, hlt_xen_paging_req *reqs, int max) {
  if (!RING_HAS_UNCONSUMED_REQUESTS(&p->back)) {
    struct pollfd fd = {.fd = xenevtchn_fd(p->xce), .events = POLLIN};
    int rc = poll(&fd, 1, timeout_ms);
    if (rc < 0) return errno == EINTR ? 0 : -errno;
    if (rc > 0 && (fd.revents & POLLIN)) {
      xenevtchn_port_or_error_t port = xenevtchn_pending(p->xce);
      if (port < 0) return -errno;
      if (xenevtchn_unmask(p->xce, (evtchn_port_t)port) < 0) return -errno;
    }
  }
  int n = 0;
  while (n < max && RING_HAS_UNCONSUMED_REQUESTS(&p->back)) {
    vm_event_request_t req;
    RING_IDX cons = p->back.req_cons;
    memcpy(&req, RING_GET_REQUEST(&p->back, cons), sizeof req);
    p->back.req_cons = cons + 1;
    p->back.sring->req_event = cons + 2; /* ask for a notification at the next request */
    if (req.version != VM_EVENT_INTERFACE_VERSION || req.reason != VM_EVENT_REASON_MEM_PAGING) continue;
    reqs[n].gfn = req.u.mem_paging.gfn;
    reqs[n].vcpu_id = req.vcpu_id;
    reqs[n].flags = req.flags;
    reqs[n].paging_flags = req.u.mem_paging.flags;
    ++n;
  }
  return n;
}

int hlt_xen_paging_unpause(hlt_xen_paging *p) {
  return xc_domain_unpause(p->xch, p->domid) == 0 ? 0 : -errno;
}
