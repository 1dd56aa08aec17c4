#define ZSTD_STATIC_LINKING_ONLY
#define ZDICT_STATIC_LINKING_ONLY
#include <zstd.h>
#include <zdict.h>
#include <cstdio>
#include <cstring>
#include <vector>
#include <ctime>
#include <cstdlib>
static double cpu(){timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec+t.tv_nsec/1e9;}
int main(int argc,char**argv){
  FILE*f=fopen(argv[1],"rb"); std::vector<unsigned char> img; 
  fseek(f,0,SEEK_END); long n=ftell(f); fseek(f,0,SEEK_SET); img.resize(n); fread(img.data(),1,n,f); fclose(f);
  size_t pages=n/4096; std::vector<size_t> nz; for(size_t p=0;p<pages;p++){bool z=true; for(size_t i=0;i<4096;i++) if(img[p*4096+i]){z=false;break;} if(!z) nz.push_back(p);}
  // content: nonzero pages concatenated
  std::vector<unsigned char> c(nz.size()*4096); for(size_t i=0;i<nz.size();i++) memcpy(&c[i*4096],&img[nz[i]*4096],4096);
  size_t ns=std::min<size_t>(4096,nz.size()); std::vector<unsigned char> s(ns*4096); for(size_t i=0;i<ns;i++) memcpy(&s[i*4096],&c[(i*nz.size()/ns)*4096],4096);
  std::vector<size_t> sz(ns,4096);
  for(int accel: {1}) for (unsigned fpar : {20u}) for (size_t dsz : {size_t(1<<20), size_t(1<<18)}) {
    std::vector<unsigned char> d(dsz); ZDICT_fastCover_params_t p{}; p.k=1024;p.d=8;p.f=fpar;p.accel=accel;p.nbThreads=1;p.splitPoint=1.0;
    double t0=cpu(); size_t r=ZDICT_trainFromBuffer_fastCover(d.data(),d.size(),s.data(),sz.data(),ns,p); double t1=cpu();
    printf("train dict %zu f=%u accel=%d: %.3f s -> %zu\n",dsz,fpar,accel,t1-t0,r);
  }
  std::vector<unsigned char> d(1<<20); ZDICT_fastCover_params_t p{}; p.k=1024;p.d=8;p.f=20;p.accel=1;p.nbThreads=1;p.splitPoint=1.0;
  size_t dl=ZDICT_trainFromBuffer_fastCover(d.data(),d.size(),s.data(),sz.data(),ns,p); d.resize(dl);
  ZSTD_CDict* cd=ZSTD_createCDict(d.data(),d.size(),3);
  ZSTD_CCtx* cc=ZSTD_createCCtx(); std::vector<unsigned char> out(ZSTD_compressBound(65536)+1000);
  const size_t F=65536;
  for(int mode=0;mode<5;mode++){
    double t0=cpu(); size_t tot=0;
    for(size_t at=0;at+F<=c.size();at+=F){
      size_t r;
      if(mode==0) r=ZSTD_compressCCtx(cc,out.data(),out.size(),&c[at],F,3);
      else if(mode==1) r=ZSTD_compress_usingCDict(cc,out.data(),out.size(),&c[at],F,cd);
      else { ZSTD_CCtx_reset(cc,ZSTD_reset_session_and_parameters); ZSTD_CCtx_refCDict(cc,cd);
        ZSTD_CCtx_setParameter(cc,ZSTD_c_forceAttachDict, mode==2?ZSTD_dictForceAttach: mode==3? ZSTD_dictForceCopy: ZSTD_dictDefaultAttach);
        r=ZSTD_compress2(cc,out.data(),out.size(),&c[at],F);}
      if(ZSTD_isError(r)){printf("err %s\n",ZSTD_getErrorName(r));return 1;}
      tot+=r;
    }
    double t1=cpu(); printf("mode %d (%s): %.3f s  %.1f MB/s content  out %zu (%.4f)\n",mode, mode==0?"nodict":mode==1?"usingCDict":mode==2?"forceAttach":mode==3?"forceCopy":"default",t1-t0,c.size()/(t1-t0)/1e6,tot,double(tot)/c.size());
  }
}
