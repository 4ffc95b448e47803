/* tree.h: a zorch_tree made by a reader other than tree.c's (pt.c's), and
   the formats zorch_tree_load tells apart by their first bytes. */
#ifndef ZORCH_IO_TREE_H
#define ZORCH_IO_TREE_H
#include "zorch.h"

/* An empty tree (zorch_tree_free frees it); NULL with the error set. */
zorch_tree *tree_new(void);
/* Appends an item, copying its key and string and retaining its tensor. */
zorch_status tree_push(zorch_tree *tree, zorch_tree_item it);

/* Whether the file's first bytes are a torch.save file's (a zip archive, or
   the pickles of the format before it). */
bool pt_is_torch_file(const unsigned char *head, size_t n);
/* Reads a torch.save file (pt.c). */
zorch_status pt_load(const char *path, zorch_tree **out);
#endif
