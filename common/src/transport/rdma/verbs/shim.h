/*
 * The C side of nvmf-common's RDMA verbs bindings. build.rs runs bindgen over this header (its allowlist picks
 * what the verbs module uses out of rdma-core's headers) and compiles shim.c, which defines the functions
 * declared below.
 *
 * verbs.h implements part of its API as static inline functions (they call the provider through
 * context->ops), so libibverbs exports no symbol for them and Rust cannot link to them. Each nvmf_ibv_X below
 * is an exported, non-inline copy of ibv_X's signature that calls ibv_X.
 */
#ifndef NVMF_VERBS_SHIM_H
#define NVMF_VERBS_SHIM_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

int nvmf_ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
int nvmf_ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
int nvmf_ibv_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
int nvmf_ibv_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
int nvmf_ibv_req_notify_cq(struct ibv_cq *cq, int solicited_only);
struct ibv_mw *nvmf_ibv_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int nvmf_ibv_dealloc_mw(struct ibv_mw *mw);

#endif
