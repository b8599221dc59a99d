/*
 * lookup.c - whether the MPI calls the plugin defines are the ones the
 * process calls.
 *
 * The plugin interposes by symbol lookup order: preloaded, its MPI_Send
 * comes before the MPI library's.  A tool preloaded before it (a profiler
 * that wraps some calls and passes them to PMPI_X), or a program that
 * exports its own MPI_X, comes before the plugin in turn, and its MPI_X
 * reaches the MPI library without passing through the plugin.  Should the
 * plugin carry the messages of its other calls, a receive of its own would
 * then wait for a message sent through the library, for ever.  So at
 * MPI_Init the plugin looks up, by name, every MPI call it exports (but
 * MPI_Init's own) and carries nothing where one of them resolves to
 * another object's definition.
 *
 * The names come from the plugin's own dynamic symbol table (the dynamic
 * section of its link map: .dynsym, its string table, and the GNU or SysV
 * hash table, whose chains give the number of symbols).
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "plugin.h"

/* The address of a dynamic-section entry: glibc relocates most entries in
 * place, other loaders leave them relative to the object's base. */
static const void *dyn_addr(const struct link_map *map, ElfW(Addr) v)
{
	return (const void *)(v < map->l_addr ? v + map->l_addr : v);
}

/* The number of symbols in .dynsym, from its hash table: the GNU one
 * where there is one (a SysV table's entries are not 32 bits everywhere). */
static size_t count_symbols(const uint32_t *gnu_hash, const uint32_t *sysv_hash)
{
	if (!gnu_hash)
		return sysv_hash ? sysv_hash[1] : 0; /* nchain: one entry a symbol */
	/* GNU: nbuckets, symoffset, bloom words, bloom shift; the bloom
	 * filter; the buckets (each its chain's first symbol, 0: none); the
	 * chains (one hash a symbol from symoffset on, the last of a chain
	 * odd). */
	uint32_t nbuckets = gnu_hash[0], symoffset = gnu_hash[1], bloom_words = gnu_hash[2];
	const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)(gnu_hash + 4) + bloom_words);
	const uint32_t *chains = buckets + nbuckets;
	uint32_t last = 0;
	for (uint32_t i = 0; i < nbuckets; i++)
		if (buckets[i] > last)
			last = buckets[i];
	if (last == 0 || last < symoffset)
		return symoffset;
	while (!(chains[last - symoffset] & 1))
		last++;
	return (size_t)last + 1;
}

/* Whether @p name is one of the MPI calls to look up.  MPI_Init and
 * MPI_Init_thread (C and Fortran) are not: the plugin is setting up, so
 * the one called reached it, and a tool's MPI_Init that passes the call on
 * to the next definition rather than PMPI_Init is harmless. */
static bool is_mpi_call(const char *name)
{
	size_t prefix = !strncmp(name, "MPI_", 4) || !strncmp(name, "mpi_", 4) ? 4 : !strncmp(name, "ompi_", 5) ? 5 : 0;
	if (!prefix)
		return false;
	const char *call = name + prefix;
	return !(strncasecmp(call, "init", 4) == 0 && (call[4] == '\0' || call[4] == '_'));
}

/* Whether @p found, what a lookup gave for one of the plugin's calls, is
 * another object's definition (under that name or an alias).  In a
 * program that is not position-independent and takes the address of an
 * MPI call, the lookup gives the entry of the program's PLT that stands
 * for the call (an undefined symbol with a value), which leads to the
 * plugin's: no definition. */
static bool defined_elsewhere(void *found, Dl_info *at)
{
	const ElfW(Sym) *sym = NULL;
	if (!dladdr1(found, at, (void **)&sym, RTLD_DL_SYMENT) || !sym)
		return false;
	return sym->st_shndx != SHN_UNDEF && at->dli_saddr == found;
}

bool pm_calls_taken(char *why, size_t len)
{
	struct link_map *map = NULL;
	Dl_info self;
	if (!dladdr1((void *)pm_calls_taken, &self, (void **)&map, RTLD_DL_LINKMAP) || !map)
		return false;

	const ElfW(Sym) *symtab = NULL;
	const char *strtab = NULL;
	const uint32_t *gnu_hash = NULL, *sysv_hash = NULL;
	size_t strsz = 0;
	for (const ElfW(Dyn) *d = map->l_ld; d->d_tag != DT_NULL; d++) {
		switch (d->d_tag) {
		case DT_SYMTAB:
			symtab = dyn_addr(map, d->d_un.d_ptr);
			break;
		case DT_STRTAB:
			strtab = dyn_addr(map, d->d_un.d_ptr);
			break;
		case DT_STRSZ:
			strsz = d->d_un.d_val;
			break;
		case DT_GNU_HASH:
			gnu_hash = dyn_addr(map, d->d_un.d_ptr);
			break;
		case DT_HASH:
			sysv_hash = dyn_addr(map, d->d_un.d_ptr);
			break;
		}
	}
	if (!symtab || !strtab)
		return false;

	size_t n = count_symbols(gnu_hash, sysv_hash), taken = 0;
	const char *first = NULL;
	Dl_info other = {0}, at;
	for (size_t i = 0; i < n; i++) {
		const ElfW(Sym) *s = &symtab[i]; /* ELF64_ST_TYPE is ELF32_ST_TYPE */
		if (s->st_shndx == SHN_UNDEF || ELF64_ST_TYPE(s->st_info) != STT_FUNC || s->st_name >= strsz)
			continue;
		const char *name = strtab + s->st_name;
		if (!is_mpi_call(name))
			continue;
		void *found = dlsym(RTLD_DEFAULT, name);
		if (!found || found == (void *)(map->l_addr + s->st_value) || !defined_elsewhere(found, &at))
			continue;
		if (taken++ == 0) {
			first = name;
			other = at;
		}
	}
	if (!taken)
		return false;
	const char *where = other.dli_fname && other.dli_fname[0] ? other.dli_fname : "the program";
	if (taken == 1)
		snprintf(why, len, "%s is defined by %s, which comes before the plugin", first, where);
	else
		snprintf(why, len, "%s and %zu more of the plugin's calls are defined by %s (or others), which come "
			 "before the plugin", first, taken - 1, where);
	return true;
}
